package hilock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * The Redisson side of the interoperability suite: one JVM, one Redisson
 * client, driven by line commands on stdin.
 *
 * <pre>
 *   request : ACTOR COMMAND ARGS...
 *   answer  : ACTOR ok VALUES...   or   ACTOR err REASON...
 * </pre>
 *
 * Every actor is a dedicated JVM thread, created the first time its name is
 * used; an actor runs its commands one after another, so a blocking lock()
 * holds up only that actor. Redisson identifies an owner by
 * "&lt;client id&gt;:&lt;Thread.getId()&gt;", so each actor is a distinct owner, just
 * like a thread of a real application.
 *
 * Commands (KIND is r = RLock, f = fair lock, R / W = read / write side of an
 * RReadWriteLock, F = RFencedLock; WAIT -1 = forever, 0 = one try;
 * LEASE 0 = watchdog):
 *   id | tid | owner
 *   lock KIND NAME WAIT LEASE       -> ok 1|0 EPOCH_US   (1 = acquired)
 *   unlock KIND NAME                -> ok EPOCH_US_BEFORE | err notowner
 *   force KIND NAME                 -> ok 1|0 EPOCH_US_BEFORE
 *   islocked|held|holds|ttl KIND NAME -> ok VALUE
 *   flock NAME WAIT LEASE           -> ok TOKEN|0 EPOCH_US   (fenced lock; 0 = not acquired)
 *   token NAME                      -> ok TOKEN  (the fenced lock's latest token, 0 none)
 *   counter KIND NAME KEY N LEASE   -> ok N   (N locked read-modify-writes of KEY)
 *   semset NAME N                   -> ok 1|0   (RSemaphore.trySetPermits)
 *   semacq NAME K WAIT              -> ok 1|0 EPOCH_US
 *   semrel NAME K                   -> ok EPOCH_US_BEFORE
 *   semavail NAME                   -> ok N
 *   semloop NAME KEY N PERMITS      -> ok N   (N rounds: acquire 1, INCR KEY, INCR
 *                                     KEY:over when above PERMITS, DECR KEY, release 1)
 *   pesacq NAME WAIT LEASE          -> ok ID|- EPOCH_US   (RPermitExpirableSemaphore)
 *   pesrel NAME ID                  -> ok 1 | err notowner
 *   latchset NAME N                 -> ok 1|0   (RCountDownLatch.trySetCount)
 *   latchdown NAME                  -> ok EPOCH_US_BEFORE
 *   latchawait NAME WAIT            -> ok 1|0 EPOCH_US
 *   latchcount NAME                 -> ok N
 *
 * Usage: java hilock.interop.Agent redis://127.0.0.1:PORT WATCHDOG_TIMEOUT_MS
 */
public final class Agent {
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                    StandardCharsets.UTF_8);

    private static RedissonClient redisson;
    private static final Map<String, BlockingQueue<String[]>> ACTORS = new ConcurrentHashMap<>();

    private Agent() {
    }

    static long epochMicros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static synchronized void answer(String actor, String text) {
        OUT.println(actor + " " + text);
    }

    static RLock lockOf(String kind, String name) {
        switch (kind) {
            case "r":
                return redisson.getLock(name);
            case "f":
                return redisson.getFairLock(name);
            case "R":
                return redisson.getReadWriteLock(name).readLock();
            case "W":
                return redisson.getReadWriteLock(name).writeLock();
            case "F":
                return redisson.getFencedLock(name);
            default:
                throw new IllegalArgumentException("kind must be r, f, R, W or F: " + kind);
        }
    }

    static boolean acquire(RLock lock, long waitMs, long leaseMs) throws InterruptedException {
        long lease = leaseMs > 0 ? leaseMs : -1; // -1 = Redisson's watchdog
        if (waitMs < 0) {
            lock.lock(lease, TimeUnit.MILLISECONDS);
            return true;
        }
        return lock.tryLock(waitMs, lease, TimeUnit.MILLISECONDS);
    }

    static String run(String[] w) throws Exception {
        switch (w[1]) {
            case "id":
                return "ok " + redisson.getId();
            case "tid":
                return "ok " + Thread.currentThread().getId();
            case "owner":
                return "ok " + redisson.getId() + ":" + Thread.currentThread().getId();
            case "flock": {
                RFencedLock lock = redisson.getFencedLock(w[2]);
                long lease = Long.parseLong(w[4]);
                Long token = lock.tryLockAndGetToken(Long.parseLong(w[3]), lease > 0 ? lease : -1,
                        TimeUnit.MILLISECONDS);
                return "ok " + (token == null ? 0 : token) + " " + epochMicros();
            }
            case "token": {
                Long token = redisson.getFencedLock(w[2]).getToken();
                return "ok " + (token == null ? 0 : token);
            }
            case "lock": {
                RLock lock = lockOf(w[2], w[3]);
                boolean got = acquire(lock, Long.parseLong(w[4]), Long.parseLong(w[5]));
                return "ok " + (got ? 1 : 0) + " " + epochMicros();
            }
            case "unlock": {
                RLock lock = lockOf(w[2], w[3]);
                long before = epochMicros();
                try {
                    lock.unlock();
                } catch (IllegalMonitorStateException e) {
                    return "err notowner";
                }
                return "ok " + before;
            }
            case "force": {
                RLock lock = lockOf(w[2], w[3]);
                long before = epochMicros();
                boolean deleted = lock.forceUnlock();
                return "ok " + (deleted ? 1 : 0) + " " + before;
            }
            case "semset":
                return "ok " + (redisson.getSemaphore(w[2]).trySetPermits(Integer.parseInt(w[3])) ? 1 : 0);
            case "semacq": {
                RSemaphore sem = redisson.getSemaphore(w[2]);
                int k = Integer.parseInt(w[3]);
                long wait = Long.parseLong(w[4]);
                boolean got = true;
                if (wait < 0) {
                    sem.acquire(k);
                } else {
                    got = sem.tryAcquire(k, wait, TimeUnit.MILLISECONDS);
                }
                return "ok " + (got ? 1 : 0) + " " + epochMicros();
            }
            case "semrel": {
                long before = epochMicros();
                redisson.getSemaphore(w[2]).release(Integer.parseInt(w[3]));
                return "ok " + before;
            }
            case "semavail":
                return "ok " + redisson.getSemaphore(w[2]).availablePermits();
            case "semloop": {
                RSemaphore sem = redisson.getSemaphore(w[2]);
                RAtomicLong inside = redisson.getAtomicLong(w[3]);
                RAtomicLong over = redisson.getAtomicLong(w[3] + ":over");
                int n = Integer.parseInt(w[4]);
                long permits = Long.parseLong(w[5]);
                for (int i = 0; i < n; i++) {
                    sem.acquire(1);
                    try {
                        if (inside.incrementAndGet() > permits) {
                            over.incrementAndGet();
                        }
                        Thread.sleep(1);
                        inside.decrementAndGet();
                    } finally {
                        sem.release(1);
                    }
                }
                return "ok " + n;
            }
            case "pesacq": {
                RPermitExpirableSemaphore sem = redisson.getPermitExpirableSemaphore(w[2]);
                long lease = Long.parseLong(w[4]);
                String id = sem.tryAcquire(Long.parseLong(w[3]), lease > 0 ? lease : -1,
                        TimeUnit.MILLISECONDS);
                return "ok " + (id == null ? "-" : id) + " " + epochMicros();
            }
            case "pesrel":
                return redisson.getPermitExpirableSemaphore(w[2]).tryRelease(w[3])
                        ? "ok 1" : "err notowner";
            case "latchset":
                return "ok " + (redisson.getCountDownLatch(w[2]).trySetCount(Long.parseLong(w[3])) ? 1 : 0);
            case "latchdown": {
                long before = epochMicros();
                redisson.getCountDownLatch(w[2]).countDown();
                return "ok " + before;
            }
            case "latchawait": {
                RCountDownLatch latch = redisson.getCountDownLatch(w[2]);
                long wait = Long.parseLong(w[3]);
                boolean open = true;
                if (wait < 0) {
                    latch.await();
                } else {
                    open = latch.await(wait, TimeUnit.MILLISECONDS);
                }
                return "ok " + (open ? 1 : 0) + " " + epochMicros();
            }
            case "latchcount":
                return "ok " + redisson.getCountDownLatch(w[2]).getCount();
            case "islocked":
                return "ok " + (lockOf(w[2], w[3]).isLocked() ? 1 : 0);
            case "held":
                return "ok " + (lockOf(w[2], w[3]).isHeldByCurrentThread() ? 1 : 0);
            case "holds":
                return "ok " + lockOf(w[2], w[3]).getHoldCount();
            case "ttl":
                return "ok " + lockOf(w[2], w[3]).remainTimeToLive();
            case "counter": {
                RLock lock = lockOf(w[2], w[3]);
                RBucket<String> key = redisson.getBucket(w[4], StringCodec.INSTANCE);
                int n = Integer.parseInt(w[5]);
                long lease = Long.parseLong(w[6]);
                for (int i = 0; i < n; i++) {
                    acquire(lock, -1, lease);
                    try {
                        // deliberately non-atomic: read, then write back + 1
                        String v = key.get();
                        long next = (v == null ? 0 : Long.parseLong(v)) + 1;
                        Thread.yield();
                        key.set(Long.toString(next));
                    } finally {
                        lock.unlock();
                    }
                }
                return "ok " + n;
            }
            default:
                return "err unknown command " + w[1];
        }
    }

    static void actorLoop(String name, BlockingQueue<String[]> queue) {
        for (;;) {
            String[] w;
            try {
                w = queue.take();
            } catch (InterruptedException e) {
                return;
            }
            String reply;
            try {
                reply = run(w);
            } catch (Exception e) {
                reply = "err " + e.getClass().getSimpleName() + ": "
                        + String.valueOf(e.getMessage()).replace('\n', ' ');
            }
            answer(name, reply);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: Agent REDIS_URL WATCHDOG_TIMEOUT_MS");
            System.exit(2);
        }
        Config config = new Config();
        config.setLockWatchdogTimeout(Long.parseLong(args[1]));
        config.useSingleServer().setAddress(args[0])
                .setConnectionMinimumIdleSize(4)
                .setConnectionPoolSize(16)
                .setSubscriptionConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionPoolSize(4);
        redisson = Redisson.create(config);
        answer("agent", "ok ready " + redisson.getId());

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w.length == 0 || w[0].isEmpty()) {
                continue;
            }
            if (w[0].equals("quit")) {
                break;
            }
            if (w.length < 2) {
                answer(w[0], "err missing command");
                continue;
            }
            BlockingQueue<String[]> q = ACTORS.computeIfAbsent(w[0], name -> {
                BlockingQueue<String[]> nq = new LinkedBlockingQueue<>();
                Thread t = new Thread(() -> actorLoop(name, nq), "actor-" + name);
                t.setDaemon(true);
                t.start();
                return nq;
            });
            q.add(w);
        }
        redisson.shutdown(0, 2, TimeUnit.SECONDS);
        System.exit(0);
    }
}
