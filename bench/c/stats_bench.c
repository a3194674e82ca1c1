/*
 * What the per-client counters (hilock_client_stats) cost on uncontended
 * lock+unlock pairs from one thread (issue 28: within the same-run noise,
 * at most 2 % on the median of at least 20 alternating slices).
 *
 *   stats_bench [-n pairs] [-r slices] [-w] [-N names] redis://127.0.0.1:PORT
 *
 * Three clients of one process on one server, each with a reentrant lock
 * of its own name, run -n pairs in turn per slice, in three roles:
 *   on     counting, as every client does
 *   off    acquire and hold figures switched off (hl_client_stats_off: no
 *          wait/outcome counters, no hold start kept per grant, no hold
 *          time at release)
 *   on2    counting too: on/on2 is the run's own noise
 * The roles rotate over the clients from slice to slice (and with them the
 * order the roles run in), so neither a client's own speed nor running
 * first favours a role.
 * Pairs take a fixed 30 s lease (hilock_lock_acquire(l, 0, 30000)), or the
 * watchdog with -w. With -N every client also keeps per-name counters
 * (hilock_options.stats_names = names), so on/off is then the cost of the
 * kind and per-name counters together (off switches both). Prints "name=value" lines: the median pairs/s of each
 * series, and per-slice ratios on/off and on/on2 as median, first and
 * third quartile; cost_pct = (1 - median on/off) * 100. Also the calling
 * thread's CPU time per pair (CLOCK_THREAD_CPUTIME_ID; a blocking pair's
 * I/O runs on the calling thread), median per series: what counting adds
 * to the client's own work, which wall-clock rates on a loaded machine
 * hide in their noise.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hilock.h"
#include "bench_util.h"

/* libcore's bench hook (src/api.h; its private headers are not for benches) */
void hl_client_stats_off(hilock_client *c, int off);

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double run(hilock_lock *l, int n, int64_t lease)
{
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        int rc = hilock_lock_acquire(l, 0, lease);
        if (rc == 0)
            rc = hilock_lock_release(l);
        if (rc != 0) {
            fprintf(stderr, "pair failed: %s (%s)\n", hilock_strerror(rc),
                    hilock_lock_errmsg(l));
            exit(1);
        }
    }
    return n / ((now_ns() - t0) / 1e9);
}

/* Sorts v; the value at fraction q (nearest rank). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(q * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv)
{
    int n = 300, slices = 21, watchdog = 0, stats_names = 0, opt;
    while ((opt = getopt(argc, argv, "n:r:wN:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'N')
            stats_names = atoi(optarg);
        else if (opt == 'r')
            slices = atoi(optarg);
        else if (opt == 'w')
            watchdog = 1;
        else
            slices = 0;
    }
    if (argc - optind != 1 || n < 1 || slices < 1 || slices > 1000 || stats_names < 0 ||
        stats_names > HILOCK_STATS_NAMES_MAX) {
        fprintf(stderr,
                "usage: stats_bench [-n pairs] [-r slices] [-w] [-N names] redis://HOST:PORT\n");
        return 2;
    }
    const char *url = argv[optind];
    enum { ON, OFF, ON2, SERIES };
    static const char *const names[SERIES] = {"on", "off", "on2"};
    hilock_client *c[SERIES];
    hilock_lock *l[SERIES];
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.stats_names = stats_names;
    for (int s = 0; s < SERIES; s++) {
        char err[256] = "";
        int orc = hilock_client_open(&c[s], url, &o, err, sizeof err);
        if (orc) {
            fprintf(stderr, "open %s: %s (%s)\n", url, hilock_strerror(orc), err);
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "bench:stats:%d:%d", s, (int)getpid());
        if (hilock_lock_new(&l[s], c[s], name) != 0) {
            fprintf(stderr, "lock_new failed\n");
            return 1;
        }
        run(l[s], n / 10 + 1, 30000); /* warm: connections, scripts loaded */
    }
    int64_t lease = watchdog ? 0 : 30000;
    double *rate[SERIES], *cpu[SERIES], *on_off = calloc((size_t)slices, sizeof(double)),
           *on_on2 = calloc((size_t)slices, sizeof(double));
    for (int s = 0; s < SERIES; s++) {
        rate[s] = calloc((size_t)slices, sizeof(double));
        cpu[s] = calloc((size_t)slices, sizeof(double));
        if (!rate[s] || !cpu[s])
            return 1;
    }
    if (!on_off || !on_on2)
        return 1;
    for (int i = 0; i < slices; i++) {
        for (int j = 0; j < SERIES; j++) /* between slices: no lock held */
            hl_client_stats_off(c[j], (j + i) % SERIES == OFF);
        for (int j = 0; j < SERIES; j++) {
            int s = (j + i) % SERIES; /* client j's role in this slice */
            double u0 = thread_cpu_us();
            rate[s][i] = run(l[j], n, lease);
            cpu[s][i] = (thread_cpu_us() - u0) / n;
        }
        on_off[i] = rate[ON][i] / rate[OFF][i];
        on_on2[i] = rate[ON][i] / rate[ON2][i];
    }
    unsigned long long counted = 0, named = 0;
    for (int j = 0; j < SERIES; j++) {
        hilock_stats st;
        memset(&st, 0, sizeof st);
        st.version = HILOCK_STATS_VERSION;
        hilock_client_stats(c[j], &st);
        counted += st.kind[HILOCK_KIND_REENTRANT].granted;
        hilock_name_stats ns;
        memset(&ns, 0, sizeof ns);
        if (stats_names && hilock_client_name_stats(c[j], HILOCK_KIND_REENTRANT,
                                                    hilock_lock_name(l[j]), &ns) == 1)
            named += ns.figures.granted;
    }
    printf("pairs_per_slice=%d\nslices=%d\nlease=%s\nstats_names=%d\n", n, slices,
           watchdog ? "watchdog" : "30s", stats_names);
    for (int s = 0; s < SERIES; s++)
        printf("%s_pairs_per_s=%.0f\n%s_cpu_us_per_pair=%.2f\n", names[s],
               median(rate[s], slices), names[s], median(cpu[s], slices));
    double m = quantile(on_off, slices, 0.5);
    printf("on_over_off_median=%.4f\non_over_off_q1=%.4f\non_over_off_q3=%.4f\n", m,
           quantile(on_off, slices, 0.25), quantile(on_off, slices, 0.75));
    printf("on_over_on2_median=%.4f\non_over_on2_q1=%.4f\non_over_on2_q3=%.4f\n",
           quantile(on_on2, slices, 0.5), quantile(on_on2, slices, 0.25),
           quantile(on_on2, slices, 0.75));
    printf("cost_pct=%.2f\n", (1 - m) * 100);
    /* the switch did what it says: the warm-up and the two counting roles
     * counted, the off role did not */
    printf("granted_counted=%llu\ngranted_expected=%llu\n", counted,
           (unsigned long long)SERIES * (n / 10 + 1) + 2ULL * (unsigned long long)slices * n);
    if (stats_names) /* each lock's pair counted what its kind did */
        printf("name_granted_counted=%llu\n", named);
    for (int s = 0; s < SERIES; s++) {
        hilock_lock_free(l[s]);
        hilock_client_close(c[s]);
        free(rate[s]);
        free(cpu[s]);
    }
    free(on_off);
    free(on_on2);
    return 0;
}
