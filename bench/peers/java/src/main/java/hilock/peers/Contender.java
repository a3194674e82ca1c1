package hilock.peers;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.redisson.Redisson;
import org.redisson.RedissonRedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson contender of the hilock peer benchmark (bench/peers/run.sh).
 * Same command line and JSON output as every other contender (see
 * bench/peers/contender.c): Contender SCENARIO key=value...
 * Redisson is used as its documentation shows: lock()/unlock() with the
 * watchdog, getFairLock for the fair lock, lockAsync/unlockAsync chains for
 * many tasks, RedissonRedLock over one client per server.
 */
public final class Contender {
    private static final Map<String, String> A = new HashMap<>();

    private static String arg(String k) {
        String v = A.get(k);
        if (v == null) {
            throw new IllegalArgumentException("missing " + k + "=");
        }
        return v;
    }

    private static String arg(String k, String def) {
        return A.getOrDefault(k, def);
    }

    private static long now() {
        return System.nanoTime(); // CLOCK_MONOTONIC on Linux: system-wide
    }

    private static RedissonClient client(String url, int pool, long watchdogMs) {
        Config config = new Config();
        config.setLockWatchdogTimeout(watchdogMs);
        String nt = System.getenv("PEERS_REDISSON_NETTY_THREADS");
        if (nt != null) {
            config.setNettyThreads(Integer.parseInt(nt));
            config.setThreads(Integer.parseInt(nt));
        }
        config.useSingleServer().setAddress(url)
                .setConnectionMinimumIdleSize(pool)
                .setConnectionPoolSize(pool)
                .setTimeout(5000);
        return Redisson.create(config);
    }

    private static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static void waitGo() throws Exception {
        emit("ready");
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
    }

    private static String pairsJson(long[] lat, long elapsed) {
        Arrays.sort(lat);
        int n = lat.length;
        return String.format("{\"pairs_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f}",
                n * 1e9 / elapsed, lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3);
    }

    private interface Pair {
        void run() throws Exception;
    }

    private static void timedPairs(Pair p) throws Exception {
        int n = Integer.parseInt(arg("n"));
        int warm = Integer.parseInt(arg("warm", "200"));
        long[] lat = new long[n];
        long t0 = 0;
        for (int i = -warm; i < n; i++) {
            long s = now();
            if (i == 0) {
                t0 = s;
            }
            p.run();
            if (i >= 0) {
                lat[i] = now() - s;
            }
        }
        emit(pairsJson(lat, now() - t0));
    }

    private static void pairs() throws Exception {
        RedissonClient r = client(arg("url"), 2, 30000);
        RLock lock = r.getLock(arg("key"));
        timedPairs(() -> {
            lock.lock();
            lock.unlock();
        });
    }

    /** n chains of lockAsync/unlockAsync, each on its own key and thread id. */
    private static void threads() throws Exception {
        int n = Integer.parseInt(arg("threads", "16"));
        long ms = Long.parseLong(arg("ms"));
        RedissonClient r = client(arg("url"), n, 30000);
        AtomicLong count = new AtomicLong();
        // the chains run warm_ms before the measured window (JIT warm-up)
        long start = now() + Long.parseLong(arg("warm_ms", "1000")) * 1_000_000L;
        long end = start + ms * 1_000_000L;
        List<CompletableFuture<Void>> done = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            RLock l = r.getLock(arg("key") + ":" + i);
            CompletableFuture<Void> f = new CompletableFuture<>();
            chain(l, 1000 + i, start, end, count, f);
            done.add(f);
        }
        CompletableFuture.allOf(done.toArray(new CompletableFuture[0])).join();
        emit(String.format("{\"pairs_per_s\": %.1f}", count.get() * 1e9 / (now() - start)));
    }

    private static void chain(RLock l, long tid, long start, long end, AtomicLong count,
                              CompletableFuture<Void> f) {
        if (now() >= end) {
            f.complete(null);
            return;
        }
        l.lockAsync(tid).toCompletableFuture()
                .thenCompose(v -> l.unlockAsync(tid).toCompletableFuture())
                .whenComplete((v, e) -> {
                    if (e != null) {
                        f.completeExceptionally(e);
                        return;
                    }
                    if (now() >= start) {
                        count.incrementAndGet();
                    }
                    chain(l, tid, start, end, count, f);
                });
    }

    private static long readCounter(FileChannel ch) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
        ch.read(b, 0);
        return b.getLong(0);
    }

    private static void handoff() throws Exception {
        int n = Integer.parseInt(arg("threads", "1"));
        long ms = Long.parseLong(arg("ms"));
        boolean fair = "1".equals(arg("fair", "0"));
        long gap = Long.parseLong(arg("gap", "1"));
        long holdUs = Long.parseLong(arg("hold_us", "0"));
        RedissonClient r = client(arg("url"), n + 1, 30000);
        FileChannel ch = new RandomAccessFile(arg("counter"), "rw").getChannel();
        RLock lock = fair ? r.getFairLock(arg("key")) : r.getLock(arg("key"));
        waitGo();
        long end = now() + ms * 1_000_000L;
        List<long[]>[] events = new List[n];
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++) {
            List<long[]> ev = new ArrayList<>();
            events[i] = ev;
            ts[i] = new Thread(() -> {
                try {
                    for (;;) {
                        long req = now();
                        lock.lock();
                        long acq = now();
                        long mine = readCounter(ch) + 1;
                        ch.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, mine), 0);
                        if (holdUs > 0) {
                            Thread.sleep(holdUs / 1000, (int) (holdUs % 1000) * 1000);
                        }
                        long unl = now();
                        lock.unlock();
                        if (acq >= end) {
                            break;
                        }
                        ev.add(new long[] {req, acq, unl});
                        while (!fair && readCounter(ch) < mine + gap && now() < end) {
                            Thread.sleep(0, 50_000);
                        }
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                    System.exit(1);
                }
            });
            ts[i].start();
        }
        StringBuilder sb = new StringBuilder("{\"events\": [");
        String sep = "";
        for (int i = 0; i < n; i++) {
            ts[i].join();
            for (long[] e : events[i]) {
                sb.append(sep).append('[').append(e[0]).append(',').append(e[1]).append(',').append(e[2]).append(']');
                sep = ",";
            }
        }
        emit(sb.append("]}").toString());
    }

    private static void watchdog() throws Exception {
        int n = Integer.parseInt(arg("n"));
        RedissonClient r = client(arg("url"), 8, Long.parseLong(arg("lease", "3000")));
        RLock[] locks = new RLock[n];
        for (int i = 0; i < n; i++) {
            locks[i] = r.getLock(arg("key") + ":" + i);
            locks[i].lock();
        }
        waitGo();
        long lost = 0;
        long held = 0;
        for (RLock l : locks) {
            if (l.isHeldByCurrentThread()) {
                held++;
                l.unlock();
            } else {
                lost++;
            }
        }
        emit(String.format("{\"lost\": %d, \"held\": %d}", lost, held));
    }

    private static void redlock() throws Exception {
        String[] urls = arg("urls").split(",");
        long lease = Long.parseLong(arg("lease", "10000"));
        RedissonClient[] rs = new RedissonClient[urls.length];
        RLock[] members = new RLock[urls.length];
        for (int i = 0; i < urls.length; i++) {
            rs[i] = client(urls[i], 2, 30000);
            members[i] = rs[i].getLock(arg("key"));
        }
        @SuppressWarnings("deprecation")
        RedissonRedLock red = new RedissonRedLock(members);
        timedPairs(() -> {
            red.lock(lease, TimeUnit.MILLISECONDS);
            red.unlock();
        });
    }

    /** Ends with System.exit: the clients' connections close with the process. */
    public static void main(String[] args) throws Exception {
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            A.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        switch (args[0]) {
            case "pairs" -> pairs();
            case "threads" -> threads();
            case "handoff" -> handoff();
            case "watchdog" -> watchdog();
            case "redlock" -> redlock();
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        }
        System.exit(0);
    }
}
