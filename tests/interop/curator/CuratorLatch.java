// Apache Curator's LeaderLatch driven line by line from stdin, for the distlock
// election interop tests (Debian's libcurator-recipes-java).
//
//   java CuratorLatch <connect string> <latch path> [session timeout ms]
// Commands (one per line) and answers:
//   start <id>   -> "started"                     (a new LeaderLatch with participant id <id>, started)
//   await <ms>   -> "leader" | "timeout"          (LeaderLatch.await with a bound)
//   has          -> "has true" | "has false"      (hasLeadership())
//   leader       -> "leader <id>" | "leader"      (getLeader().getId(): the first latch node's data;
//                                                  no id when there is no leader)
//   node         -> "node <czxid>"                (our latch node's czxid, -1 when none)
//   close        -> "closed"                      (close(): gives up leadership, deletes our node)
//   quit         -> exits
// Errors go to stderr as "error <message>" and to stdout as "error".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public class CuratorLatch {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: CuratorLatch <connect> <latch path> [session timeout ms]");
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
        LeaderLatch latch = null;
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            try {
                switch (w[0]) {
                    case "start":
                        latch = new LeaderLatch(client, args[1], w[1]);
                        latch.start();
                        System.out.println("started");
                        break;
                    case "await":
                        System.out.println(latch.await(Long.parseLong(w[1]), TimeUnit.MILLISECONDS) ? "leader" : "timeout");
                        break;
                    case "has":
                        System.out.println("has " + latch.hasLeadership());
                        break;
                    case "leader": {
                        Participant p = latch.getLeader();
                        System.out.println(p.getId().isEmpty() ? "leader" : "leader " + p.getId());
                        break;
                    }
                    case "node": {
                        String ours = latch.getOurPath();
                        Stat st = ours == null ? null : client.checkExists().forPath(ours);
                        System.out.println("node " + (st == null ? -1 : st.getCzxid()));
                        break;
                    }
                    case "close":
                        latch.close();
                        System.out.println("closed");
                        break;
                    case "quit":
                        if (latch != null && latch.getState() == LeaderLatch.State.STARTED) latch.close();
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
