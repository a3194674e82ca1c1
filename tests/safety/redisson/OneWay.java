/*
 * One Redisson 4.7.0 client alone on one lock, for tests/safety/redisson/one_way.py:
 * it loops tryLockAndGetToken (wait 2 s, watchdog lease) / hold 300 ms / unlock,
 * the options of the safety workers (500 ms command timeout), and prints one
 * line per call: "<System.nanoTime()> acq ok|timeout|error <detail>" or
 * "<t> rel ok|error". System.nanoTime() is CLOCK_MONOTONIC on Linux, the
 * clock of the Python side.
 *
 *   java ... OneWay PORT LOCK SECONDS
 */
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class OneWay {
    private OneWay() {
    }

    static void out(String what) {
        System.out.println(System.nanoTime() + " " + what);
        System.out.flush();
    }

    public static void main(String[] a) throws Exception {
        Config config = new Config();
        config.setLockWatchdogTimeout(3000);
        config.useSingleServer().setAddress("redis://127.0.0.1:" + a[0]).setTimeout(500)
                .setConnectTimeout(500).setConnectionMinimumIdleSize(2).setConnectionPoolSize(8)
                .setSubscriptionConnectionMinimumIdleSize(1);
        RedissonClient redisson = Redisson.create(config);
        RFencedLock lock = redisson.getFencedLock(a[1]);
        out("ready");
        long end = System.nanoTime() + Long.parseLong(a[2]) * 1_000_000_000L;
        while (System.nanoTime() < end) {
            Long token;
            try {
                token = lock.tryLockAndGetToken(2000, -1, TimeUnit.MILLISECONDS);
            } catch (Exception e) {
                out("acq error " + e.getClass().getSimpleName());
                Thread.sleep(75);
                continue;
            }
            if (token == null) {
                out("acq timeout");
                continue;
            }
            out("acq ok " + token);
            Thread.sleep(300);
            try {
                lock.unlock();
                out("rel ok");
            } catch (Exception e) {
                out("rel error " + e.getClass().getSimpleName());
            }
            Thread.sleep(100);
        }
        redisson.shutdown(0, 2, TimeUnit.SECONDS);
        System.exit(0);
    }
}
