// Apache Curator's InterProcessMutex driven line by line from stdin, for the
// distlock interop tests and benchmarks (Debian's libcurator-recipes-java).
//
//   java CuratorLock <connect string> <lock path> [session timeout ms] [user:password]
// With user:password the client authenticates with digest and creates every node
// with ZooDefs.Ids.CREATOR_ALL_ACL (its ACLProvider), as zk:// does by default
// with credentials (acl=creator).
// Commands (one per line) and answers:
//   lock            -> "locked <czxid of our lock node>"          (waits without bound)
//   try <ms>        -> "locked <czxid>" | "timeout"
//   unlock          -> "unlocked"
//   lockq           -> "locked"                                   (lock, without looking up the czxid)
//   bench <n>       -> "bench <n> <total ns> <p50 ns> <p99 ns>"    (n uncontended lock+unlock cycles)
//   samples <n>     -> "samples <ns> <ns> ..."                     (n uncontended cycles, each one's time)
//   floor <n>       -> "floor <ns> <ns> ..."                       (n bare create(EPHEMERAL_SEQUENTIAL) + delete
//                                                                   of the Java ZooKeeper client, each one's time)
//   count <file> <n> -> "counted"                                  (n times: acquire, read the integer in <file>,
//                                                                   pause, write it + 1, release)
//   nodes           -> "nodes <child> <child> ..."                 (the lock path's children, sorted as Curator does)
// InterProcessReadWriteLock on the same path (one holder per side at a time):
//   rlock | wlock   -> "locked <czxid of our read / write node>"  (waits without bound)
//   rtry <ms> | wtry <ms> -> "locked <czxid>" | "timeout"
//   runlock | wunlock -> "unlocked"
//   rwmix <file> <n> -> "mixed"                                   (n rounds, reading and writing in turn; each
//                                                                   holder enters and leaves the shared record in
//                                                                   <file>: see below)
// InterProcessSemaphoreV2 on the same path (maxLeases given per command):
//   lease <max> <ms> -> "leased <czxid of our lease node>" | "timeout"
//   return          -> "returned"                                  (the latest lease held)
//   permits <max> <file> <n> -> "permitted"                        (n rounds: take a lease, enter and leave the
//                                                                   record in <file>, return the lease)
//   quit            -> exits
// The record in <file> is a line of numbers "a b c d" updated under a POSIX
// record lock (FileChannel.lock is fcntl on Linux, as the C++ side's):
//   rwmix:   readers writers violations rounds  (a writer entering with anyone
//            inside, or a reader entering beside a writer, is a violation)
//   permits: inside max_inside rounds 0
// Errors go to stderr as "error <message>" and to stdout as "error".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import java.util.Collection;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.Stat;

public class CuratorLock {
    private static long czxidOfHolder(CuratorFramework client, InterProcessMutex mutex) throws Exception {
        Collection<String> nodes = mutex.getParticipantNodes();  // sorted: the holder first
        String first = nodes.iterator().next();
        Stat st = client.checkExists().forPath(first);
        return st == null ? -1 : st.getCzxid();
    }

    // Our own node of a read or write lock (InterProcessMutex.getLockPath is protected).
    private static long czxidOfOwn(CuratorFramework client, InterProcessMutex m) throws Exception {
        Method get = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        get.setAccessible(true);
        String path = (String) get.invoke(m);
        Stat st = path == null ? null : client.checkExists().forPath(path);
        return st == null ? -1 : st.getCzxid();
    }

    // Applies `change` to the record of numbers in `file` under a POSIX record lock.
    private interface Change { void apply(long[] v); }
    private static void update(String file, Change change) throws Exception {
        try (FileChannel ch = FileChannel.open(java.nio.file.Paths.get(file), StandardOpenOption.READ,
                StandardOpenOption.WRITE);
             FileLock lock = ch.lock()) {
            ByteBuffer buf = ByteBuffer.allocate(512);
            ch.read(buf, 0);
            String[] words = new String(buf.array(), 0, buf.position()).trim().split("\\s+");
            long[] v = new long[4];
            for (int i = 0; i < v.length && i < words.length; ++i) v[i] = Long.parseLong(words[i]);
            change.apply(v);
            String out = v[0] + " " + v[1] + " " + v[2] + " " + v[3] + "\n";
            ch.truncate(0);
            ch.write(ByteBuffer.wrap(out.getBytes()), 0);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: CuratorLock <connect> <lock path> [session timeout ms]");
            System.exit(2);
        }
        int sessionMs = args.length > 2 ? Integer.parseInt(args[2]) : 2000;
        CuratorFrameworkFactory.Builder builder = CuratorFrameworkFactory.builder().connectString(args[0])
                .sessionTimeoutMs(sessionMs).connectionTimeoutMs(10000).retryPolicy(new ExponentialBackoffRetry(100, 3));
        if (args.length > 3) {
            builder.authorization("digest", args[3].getBytes(java.nio.charset.StandardCharsets.UTF_8))
                    .aclProvider(new ACLProvider() {
                        @Override public java.util.List<ACL> getDefaultAcl() { return ZooDefs.Ids.CREATOR_ALL_ACL; }
                        @Override public java.util.List<ACL> getAclForPath(String path) { return ZooDefs.Ids.CREATOR_ALL_ACL; }
                    });
        }
        CuratorFramework client = builder.build();
        client.start();
        if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
            System.out.println("error");
            System.err.println("error cannot connect to " + args[0]);
            System.exit(1);
        }
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, args[1]);
        Deque<Lease> leases = new ArrayDeque<>();
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            try {
                switch (w[0]) {
                    case "lock":
                        mutex.acquire();
                        System.out.println("locked " + czxidOfHolder(client, mutex));
                        break;
                    case "lockq":
                        mutex.acquire();
                        System.out.println("locked");
                        break;
                    case "samples": {
                        int n = Integer.parseInt(w[1]);
                        StringBuilder sb = new StringBuilder("samples");
                        for (int i = 0; i < n; ++i) {
                            long t0 = System.nanoTime();
                            mutex.acquire();
                            mutex.release();
                            sb.append(' ').append(System.nanoTime() - t0);
                        }
                        System.out.println(sb);
                        break;
                    }
                    case "floor": {
                        int n = Integer.parseInt(w[1]);
                        org.apache.zookeeper.ZooKeeper zk = client.getZookeeperClient().getZooKeeper();
                        String dir = args[1] + "-floor";
                        client.create().creatingParentContainersIfNeeded().forPath(dir + "/keep");
                        StringBuilder sb = new StringBuilder("floor");
                        for (int i = 0; i < n; ++i) {
                            long t0 = System.nanoTime();
                            String made = zk.create(dir + "/n-", new byte[0], org.apache.zookeeper.ZooDefs.Ids.OPEN_ACL_UNSAFE,
                                    org.apache.zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL);
                            zk.delete(made, -1);
                            sb.append(' ').append(System.nanoTime() - t0);
                        }
                        client.delete().deletingChildrenIfNeeded().forPath(dir);
                        System.out.println(sb);
                        break;
                    }
                    case "count": {
                        java.nio.file.Path file = java.nio.file.Paths.get(w[1]);
                        int n = Integer.parseInt(w[2]);
                        for (int i = 0; i < n; ++i) {
                            mutex.acquire();
                            try {
                                long v = Long.parseLong(new String(java.nio.file.Files.readAllBytes(file)).trim());
                                Thread.sleep(1);  // widen the race window
                                java.nio.file.Files.write(file, (Long.toString(v + 1) + "\n").getBytes());
                            } finally {
                                mutex.release();
                            }
                        }
                        System.out.println("counted");
                        break;
                    }
                    case "try":
                        if (mutex.acquire(Long.parseLong(w[1]), TimeUnit.MILLISECONDS))
                            System.out.println("locked " + czxidOfHolder(client, mutex));
                        else
                            System.out.println("timeout");
                        break;
                    case "unlock":
                        mutex.release();
                        System.out.println("unlocked");
                        break;
                    case "bench": {
                        int n = Integer.parseInt(w[1]);
                        long[] t = new long[n];
                        long start = System.nanoTime();
                        for (int i = 0; i < n; ++i) {
                            long t0 = System.nanoTime();
                            mutex.acquire();
                            mutex.release();
                            t[i] = System.nanoTime() - t0;
                        }
                        long total = System.nanoTime() - start;
                        Arrays.sort(t);
                        System.out.println("bench " + n + " " + total + " " + t[n / 2] + " " + t[Math.min(n - 1, (int) (n * 0.99))]);
                        break;
                    }
                    case "nodes": {
                        StringBuilder sb = new StringBuilder("nodes");
                        for (String p : mutex.getParticipantNodes()) sb.append(' ').append(p.substring(p.lastIndexOf('/') + 1));
                        System.out.println(sb);
                        break;
                    }
                    case "rlock":
                        rw.readLock().acquire();
                        System.out.println("locked " + czxidOfOwn(client, rw.readLock()));
                        break;
                    case "wlock":
                        rw.writeLock().acquire();
                        System.out.println("locked " + czxidOfOwn(client, rw.writeLock()));
                        break;
                    case "rtry":
                    case "wtry": {
                        InterProcessMutex side = w[0].equals("rtry") ? rw.readLock() : rw.writeLock();
                        if (side.acquire(Long.parseLong(w[1]), TimeUnit.MILLISECONDS))
                            System.out.println("locked " + czxidOfOwn(client, side));
                        else
                            System.out.println("timeout");
                        break;
                    }
                    case "runlock":
                        rw.readLock().release();
                        System.out.println("unlocked");
                        break;
                    case "wunlock":
                        rw.writeLock().release();
                        System.out.println("unlocked");
                        break;
                    case "rwmix": {
                        String file = w[1];
                        int n = Integer.parseInt(w[2]);
                        for (int i = 0; i < n; ++i) {
                            boolean write = i % 2 == 1;
                            InterProcessMutex side = write ? rw.writeLock() : rw.readLock();
                            side.acquire();
                            try {
                                update(file, v -> {
                                    if (write ? (v[0] != 0 || v[1] != 0) : v[1] != 0) v[2]++;
                                    if (write) v[1]++; else v[0]++;
                                });
                                Thread.sleep(2);
                                update(file, v -> {
                                    if (write) v[1]--; else v[0]--;
                                    v[3]++;
                                });
                            } finally {
                                side.release();
                            }
                        }
                        System.out.println("mixed");
                        break;
                    }
                    case "lease": {
                        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, args[1], Integer.parseInt(w[1]));
                        Lease l = sem.acquire(Long.parseLong(w[2]), TimeUnit.MILLISECONDS);
                        if (l == null) {
                            System.out.println("timeout");
                            break;
                        }
                        leases.push(l);
                        // getNodeName() is the lease node's name, under <path>/leases.
                        Stat st = client.checkExists().forPath(args[1] + "/leases/" + l.getNodeName());
                        System.out.println("leased " + (st == null ? -1 : st.getCzxid()));
                        break;
                    }
                    case "return":
                        leases.pop().close();
                        System.out.println("returned");
                        break;
                    case "permits": {
                        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, args[1], Integer.parseInt(w[1]));
                        String file = w[2];
                        int n = Integer.parseInt(w[3]);
                        for (int i = 0; i < n; ++i) {
                            Lease l = sem.acquire();
                            try {
                                update(file, v -> {
                                    v[0]++;
                                    v[1] = Math.max(v[1], v[0]);
                                });
                                Thread.sleep(2);
                                update(file, v -> {
                                    v[0]--;
                                    v[2]++;
                                });
                            } finally {
                                sem.returnLease(l);
                            }
                        }
                        System.out.println("permitted");
                        break;
                    }
                    case "quit":
                        client.close();
                        System.out.flush();
                        System.exit(0);
                        break;
                    default:
                        System.out.println("error");
                        System.err.println("error unknown command " + w[0]);
                }
            } catch (Exception e) {
                System.out.println("error");
                System.err.println("error " + e);
            }
            System.out.flush();
        }
        client.close();
    }
}
