// Apache Curator's InterProcessMutex driven line by line from stdin, for the
// distlock interop tests and benchmarks (Debian's libcurator-recipes-java).
//
//   java CuratorLock <connect string> <lock path> [session timeout ms]
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
//   quit            -> exits
// Errors go to stderr as "error <message>" and to stdout as "error".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Arrays;
import java.util.Collection;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public class CuratorLock {
    private static long czxidOfHolder(CuratorFramework client, InterProcessMutex mutex) throws Exception {
        Collection<String> nodes = mutex.getParticipantNodes();  // sorted: the holder first
        String first = nodes.iterator().next();
        Stat st = client.checkExists().forPath(first);
        return st == null ? -1 : st.getCzxid();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: CuratorLock <connect> <lock path> [session timeout ms]");
            System.exit(2);
        }
        int sessionMs = args.length > 2 ? Integer.parseInt(args[2]) : 2000;
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], sessionMs, 10000,
                new ExponentialBackoffRetry(100, 3));
        client.start();
        if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
            System.out.println("error");
            System.err.println("error cannot connect to " + args[0]);
            System.exit(1);
        }
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
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
