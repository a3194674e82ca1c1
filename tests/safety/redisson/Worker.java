/*
 * One safety client process on Redisson (RFencedLock), the peer hilock shares
 * its locks with: the loop and the JSON-lines history of worker.c
 * (tests/safety/README.md), on the same lock and fencing store.
 *
 *   java ... Worker URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...
 *
 * URL: redis://host:port[/db] or redis+sentinel://h:p,h:p/name. Times are
 * System.nanoTime(), CLOCK_MONOTONIC on Linux: the clock of every process of
 * the run. Redisson has no lost or in-doubt report: its watchdog renews
 * silently and stops on an error; a holder is never told, so a watchdog
 * holder writes until it releases (its guarantee is the fencing store's).
 * With a fixed lease it stops writing at 4/5 of the lease by its own clock,
 * as every worker.
 */
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.redisson.config.ReadMode;

public final class Worker {
    static final String FENCE_LUA = "local function ge(a, b)\n"
            + "  if #a ~= #b then return #a > #b end\n"
            + "  return a >= b\n"
            + "end\n"
            + "local hi = redis.call('GET', KEYS[1])\n"
            + "local ok = 0\n"
            + "if (not hi) or ge(ARGV[1], hi) then\n"
            + "  redis.call('SET', KEYS[1], ARGV[1]); ok = 1\n"
            + "end\n"
            + "redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ok)\n"
            + "return ok\n";

    static PrintStream log;
    static int proc;
    static int nextId;

    static synchronized void line(String s) {
        log.print(s + ",\"p\":" + proc + "}\n");
        log.flush();
    }

    static int inv(String op, String extra) {
        int id = ++nextId;
        line("{\"ev\":\"inv\",\"op\":\"" + op + "\",\"id\":" + id + ",\"t\":" + System.nanoTime() + extra);
        return id;
    }

    static void ret(String op, int id, String res, String extra) {
        line("{\"ev\":\"ret\",\"op\":\"" + op + "\",\"id\":" + id + ",\"t\":" + System.nanoTime()
                + ",\"res\":\"" + res + "\"" + extra);
    }

    static String errJson(Throwable e) {
        String msg = String.valueOf(e.getMessage()).replaceAll("[\\p{Cntrl}\"\\\\]", "");
        if (msg.length() > 200) {
            msg = msg.substring(0, 200);
        }
        return ",\"err\":\"" + e.getClass().getSimpleName() + "\",\"msg\":\"" + msg + "\"";
    }

    /* the fencing store: EVAL over a plain socket; 1 accepted, 0 refused, -1 error */
    static final class Fence {
        final Socket s;
        final OutputStream out;
        final InputStream in;
        final String hi, log;

        Fence(int port, String lock) throws Exception {
            s = new Socket();
            s.connect(new InetSocketAddress("127.0.0.1", port), 5000);
            s.setTcpNoDelay(true);
            s.setSoTimeout(5000);
            out = s.getOutputStream();
            in = s.getInputStream();
            hi = "fence:hi:" + lock;
            log = "fence:log:" + lock;
        }

        int write(long token, String grant) {
            String[] args = {"EVAL", FENCE_LUA, "2", hi, log, Long.toString(token), grant};
            StringBuilder b = new StringBuilder("*" + args.length + "\r\n");
            for (String a : args) {
                b.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n")
                        .append(a).append("\r\n");
            }
            try {
                out.write(b.toString().getBytes(StandardCharsets.UTF_8));
                out.flush();
                StringBuilder r = new StringBuilder();
                int c;
                while ((c = in.read()) >= 0 && c != '\n') {
                    r.append((char) c);
                }
                String rep = r.toString().trim();
                return rep.equals(":1") ? 1 : rep.equals(":0") ? 0 : -1;
            } catch (Exception e) {
                return -1;
            }
        }
    }

    public static void main(String[] a) throws Exception {
        if (a.length < 7) {
            System.err.println("usage: Worker URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG [K=V...]");
            System.exit(2);
        }
        String url = a[0], lockName = a[1];
        int fencePort = Integer.parseInt(a[2]);
        proc = Integer.parseInt(a[3]);
        long seed = Long.parseLong(a[4]);
        double secs = Double.parseDouble(a[5]);
        Map<String, Long> o = new HashMap<>();
        o.put("lease_ms", 0L);
        o.put("watchdog_lease_ms", 3000L);
        o.put("command_timeout_ms", 500L);
        o.put("connect_timeout_ms", 500L);
        o.put("wait_ms", 2000L);
        o.put("writes", 3L);
        o.put("hold_ms", 60L);
        for (int i = 7; i < a.length; i++) {
            int eq = a[i].indexOf('=');
            if (eq < 0) {
                System.exit(2);
            }
            try {
                o.put(a[i].substring(0, eq), Long.parseLong(a[i].substring(eq + 1)));
            } catch (NumberFormatException e) {
                System.exit(2); // broken=... (the self-tests) is not for this worker
            }
        }
        log = new PrintStream(new FileOutputStream(a[6], true), false, StandardCharsets.UTF_8);
        Random rnd = new Random(seed * 1000 + proc);
        Fence fence = new Fence(fencePort, lockName);
        line("{\"ev\":\"start\",\"t\":" + System.nanoTime() + ",\"pid\":" + ProcessHandle.current().pid()
                + ",\"driver\":\"redisson\"");

        Config config = new Config();
        config.setLockWatchdogTimeout(o.get("watchdog_lease_ms"));
        int timeout = o.get("command_timeout_ms").intValue();
        int connect = o.get("connect_timeout_ms").intValue();
        if (url.startsWith("redis+sentinel://")) {
            String rest = url.substring("redis+sentinel://".length());
            int slash = rest.indexOf('/');
            // few connections, none to replicas: each one opened through the
            // harness's proxies costs it a look into /proc (who opened it)
            var s = config.useSentinelServers().setMasterName(rest.substring(slash + 1))
                    .setCheckSentinelsList(false).setTimeout(timeout).setConnectTimeout(connect)
                    .setReadMode(ReadMode.MASTER).setMasterConnectionMinimumIdleSize(2)
                    .setMasterConnectionPoolSize(8).setSlaveConnectionMinimumIdleSize(1)
                    .setSlaveConnectionPoolSize(2).setSubscriptionConnectionMinimumIdleSize(1);
            for (String hp : rest.substring(0, slash).split(",")) {
                s.addSentinelAddress("redis://" + hp);
            }
        } else {
            String hp = url.replaceFirst("^redis://", "").replaceFirst("/.*$", "");
            config.useSingleServer().setAddress("redis://" + hp).setTimeout(timeout)
                    .setConnectTimeout(connect).setConnectionMinimumIdleSize(2)
                    .setConnectionPoolSize(8).setSubscriptionConnectionMinimumIdleSize(1);
        }
        RedissonClient redisson = null;
        long openUntil = System.nanoTime() + 30_000_000_000L;
        while (redisson == null) {
            try {
                redisson = Redisson.create(config);
            } catch (Exception e) {
                if (System.nanoTime() > openUntil) {
                    line("{\"ev\":\"fatal\",\"t\":" + System.nanoTime() + ",\"err\":\"open\"");
                    System.exit(1);
                }
                Thread.sleep(100);
            }
        }
        RFencedLock lock = redisson.getFencedLock(lockName);
        line("{\"ev\":\"ready\",\"t\":" + System.nanoTime());
        long leaseMs = o.get("lease_ms");
        long deadline = System.nanoTime() + (long) (secs * 1e9);
        int grants = 0;
        while (System.nanoTime() < deadline) {
            int oid = inv("acq", ",\"lease_ms\":" + leaseMs);
            long acqInv = System.nanoTime();
            Long token;
            try {
                token = lock.tryLockAndGetToken(o.get("wait_ms"), leaseMs > 0 ? leaseMs : -1,
                        TimeUnit.MILLISECONDS);
            } catch (Exception e) {
                ret("acq", oid, "error", errJson(e));
                Thread.sleep(50 + rnd.nextInt(50));
                continue;
            }
            if (token == null) {
                ret("acq", oid, "timeout", "");
                continue;
            }
            grants++;
            String grant = proc + "." + grants;
            ret("acq", oid, "ok", ",\"token\":" + token + ",\"grant\":\"" + grant + "\"");
            for (long w = 0; w < o.get("writes"); w++) {
                Thread.sleep((long) ((0.2 + 0.8 * rnd.nextDouble()) * o.get("hold_ms")));
                if (leaseMs > 0 && System.nanoTime() >= acqInv + (leaseMs - leaseMs / 5) * 1_000_000) {
                    break;
                }
                int wid = inv("write", ",\"token\":" + token + ",\"grant\":\"" + grant + "\"");
                int ok = fence.write(token, grant);
                ret("write", wid, ok == 1 ? "ok" : ok == 0 ? "refused" : "error", "");
            }
            int rid = inv("rel", ",\"grant\":\"" + grant + "\"");
            try {
                lock.unlock();
                ret("rel", rid, "ok", "");
            } catch (IllegalMonitorStateException e) {
                ret("rel", rid, "notowner", "");
            } catch (Exception e) {
                ret("rel", rid, "error", errJson(e));
            }
            Thread.sleep(rnd.nextInt(50));
        }
        line("{\"ev\":\"end\",\"t\":" + System.nanoTime());
        log.close();
        redisson.shutdown(0, 2, TimeUnit.SECONDS);
        System.exit(0);
    }
}
