package io.isrwatch.agent;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.Collection;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Reads members of Kafka objects whose class moved or changed between releases (Scala kafka.cluster.Replica vs Java
 * org.apache.kafka.server.replica.Replica, scala.collection vs java.util ids), by name, with the Method or Field
 * cached per class. Used off the hottest path only (fetches use typed members and a field the advice binds).
 */
final class Reflect {

    private Reflect() {
    }

    /** Members found by name, per class: a lookup that may throw for a member the class does not have. */
    private static final class Members<T> extends ClassValue<ConcurrentHashMap<String, T>> {
        private final Finder<T> finder;

        Members(Finder<T> finder) {
            this.finder = finder;
        }

        @Override
        protected ConcurrentHashMap<String, T> computeValue(Class<?> c) {
            return new ConcurrentHashMap<>();
        }

        T of(Class<?> c, String name) throws ReflectiveOperationException {
            ConcurrentHashMap<String, T> known = get(c);
            T member = known.get(name);
            if (member == null) {
                member = finder.find(c, name);
                known.put(name, member);
            }
            return member;
        }
    }

    @FunctionalInterface
    private interface Finder<T> {
        T find(Class<?> c, String name) throws ReflectiveOperationException;
    }

    private static final Members<Method> METHODS = new Members<>(Reflect::find);
    private static final Members<Field> FIELDS = new Members<>(Reflect::findField);

    /** {@code target.name()}. */
    static Object call(Object target, String name) throws ReflectiveOperationException {
        return METHODS.of(target.getClass(), name).invoke(target);
    }

    /** {@code target.name()}, or null when the class has no such method (a member one release does not have). */
    static Object callIfPresent(Object target, String name) throws ReflectiveOperationException {
        try {
            return call(target, name);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    private static Method find(Class<?> c, String name) throws NoSuchMethodException {
        for (Class<?> k = c; k != null; k = k.getSuperclass()) {
            for (Method m : k.getDeclaredMethods()) {
                if (m.getName().equals(name) && m.getParameterCount() == 0 && !m.isBridge()) {
                    m.setAccessible(true);
                    return m;
                }
            }
        }
        throw new NoSuchMethodException(c.getName() + "#" + name + "()");
    }

    /** The value of the (possibly private) instance field {@code name}. */
    static Object field(Object target, String name) throws ReflectiveOperationException {
        return FIELDS.of(target.getClass(), name).get(target);
    }

    private static Field findField(Class<?> c, String name) throws NoSuchFieldException {
        for (Class<?> k = c; k != null; k = k.getSuperclass()) {
            try {
                Field f = k.getDeclaredField(name);
                f.setAccessible(true);
                return f;
            } catch (NoSuchFieldException e) {
                // try the superclass
            }
        }
        throw new NoSuchFieldException(c.getName() + "#" + name);
    }

    static int intValue(Object target, String name) throws ReflectiveOperationException {
        return ((Number) call(target, name)).intValue();
    }

    static long longValue(Object target, String name) throws ReflectiveOperationException {
        return ((Number) call(target, name)).longValue();
    }

    /** Broker ids in their order: an int[], a java.util.Collection or a scala.collection.Iterable of Integers. */
    static int[] ids(Object ids) {
        if (ids == null) {
            return new int[0];
        }
        if (ids instanceof int[] a) {
            return a.clone();
        }
        if (ids instanceof Collection<?> c) {
            int[] a = new int[c.size()];
            int i = 0;
            for (Object o : c) {
                a[i++] = ((Number) o).intValue();
            }
            return a;
        }
        if (ids instanceof scala.collection.Iterable<?> s) {
            int[] a = new int[s.size()];
            int i = 0;
            scala.collection.Iterator<?> it = s.iterator();
            while (it.hasNext()) {
                a[i++] = ((Number) it.next()).intValue();
            }
            return a;
        }
        throw new IllegalArgumentException("not a collection of ids: " + ids.getClass().getName());
    }

    static int[] sortedIds(Object ids) {
        int[] a = ids(ids);
        Arrays.sort(a);
        return a;
    }

    /** The elements of a java.util.Collection or a scala.collection.Iterable. */
    static java.util.List<Object> list(Object items) {
        java.util.List<Object> out = new java.util.ArrayList<>();
        if (items instanceof Collection<?> c) {
            out.addAll(c);
        } else if (items instanceof scala.collection.Iterable<?> s) {
            scala.collection.Iterator<?> it = s.iterator();
            while (it.hasNext()) {
                out.add(it.next());
            }
        }
        return out;
    }
}
