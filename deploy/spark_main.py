"""spark-submit entry point of the image: `spark_main.py run --source ...` is `isrwatch run --source ...`."""

import sys

from isrwatch.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
