/*
 * hilock top: every lock whose name matches PATTERN (SCAN on every master,
 * hilock_scan_names; then hilock_inspect per name, as hilock status does),
 * all kinds, Redisson's included, one line each, sorted, refreshed like
 * top(1) until interrupted; --once --json prints status's JSON document
 * once, sorted the same way.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hilock.h"

enum { SORT_WAITERS, SORT_LEASE, SORT_NAME };

static void top_usage(FILE *f)
{
    fputs("Usage: hilock top [OPTIONS] [PATTERN]\n"
          "\n"
          "Every lock whose name matches PATTERN (Redis SCAN MATCH; default *; every\n"
          "master of a cluster), whatever its kind and whoever holds it (Redisson\n"
          "too): holders (client id and thread), hold count, lease left, fair queue,\n"
          "waiting clients (subscribed for a wake-up), semaphore permits. Keys that\n"
          "hold no lock data are left out. Refreshed every --interval seconds until\n"
          "interrupted.\n"
          "\n"
          "  --url URL        server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  --once           print once and exit\n"
          "  --json           with --once: status's JSON document, {\"version\":1,\n"
          "                   \"locks\":[...]}, in the sort order\n"
          "  --sort KEY       waiters (default: most waiting first: subscribed clients\n"
          "                   plus fair queue), lease (least lease left first), name\n"
          "  -d, --interval S seconds between refreshes (default 2)\n"
          "  -h, --help       this help\n"
          "\n"
          "Exit status: 0 ok, 2 usage error, 69 server unreachable or error.\n",
          f);
}

/* How many wait for the lock: subscribed clients, or the fair queue when
 * it is longer (a fair waiter listens on a channel of its own). */
static int64_t waiters_of(const hilock_lock_info *v)
{
    int64_t w = v->waiting > 0 ? v->waiting : 0;
    return (int64_t)v->nqueue > w ? (int64_t)v->nqueue : w;
}

/* Lease left for sorting: none or no expiry last. */
static int64_t lease_key(const hilock_lock_info *v)
{
    return v->lease_ms >= 0 ? v->lease_ms : INT64_MAX;
}

static int sort_key = SORT_WAITERS;

static int cmp_info(const void *a, const void *b)
{
    const hilock_lock_info *x = *(hilock_lock_info *const *)a;
    const hilock_lock_info *y = *(hilock_lock_info *const *)b;
    if (sort_key == SORT_WAITERS && waiters_of(x) != waiters_of(y))
        return waiters_of(x) > waiters_of(y) ? -1 : 1;
    if (sort_key == SORT_LEASE && lease_key(x) != lease_key(y))
        return lease_key(x) < lease_key(y) ? -1 : 1;
    return strcmp(x->name, y->name);
}

static const char *kind_word(const hilock_lock_info *v)
{
    switch (v->kind) {
    case HILOCK_INFO_REENTRANT: return "reentrant";
    case HILOCK_INFO_FAIR: return "fair";
    case HILOCK_INFO_READWRITE:
        return !strcmp(v->mode, "read") ? "rw/read" : !strcmp(v->mode, "write") ? "rw/write"
                                                                                 : "read-write";
    case HILOCK_INFO_FENCED: return "fenced";
    case HILOCK_INFO_COUNT: return "count";
    case HILOCK_INFO_PERMIT_SEMAPHORE: return "permits";
    default: return "unknown";
    }
}

/* One screen (or one --once listing): a header and a line per lock. */
static void print_table(FILE *f, hilock_lock_info **v, size_t n, const char *pattern,
                        const char *url)
{
    fprintf(f, "hilock top: %zu lock%s matching ", n, n == 1 ? "" : "s");
    human_string(f, pattern, strlen(pattern));
    fprintf(f, " on %s\n", cli_shown_url(url));
    fprintf(f, "%-10s %7s %5s %10s %5s %7s %7s  %-40s %s\n", "KIND", "WAITING", "QUEUE",
            "LEASE", "HOLDS", "HOLDERS", "PERMITS", "HOLDER (client:thread)", "NAME");
    for (size_t i = 0; i < n; i++) {
        const hilock_lock_info *x = v[i];
        char lease[24] = "-", holds[24] = "-", permits[24] = "-";
        if (x->lease_ms >= 0)
            snprintf(lease, sizeof lease, "%" PRId64 ".%03" PRId64 "s", x->lease_ms / 1000,
                     x->lease_ms % 1000);
        else if (x->lease_ms == -1)
            snprintf(lease, sizeof lease, "no expiry");
        int64_t total = 0;
        for (size_t h = 0; h < x->nholders; h++)
            total += x->holders[h].holds > 0 ? x->holders[h].holds : 0;
        if (x->nholders)
            snprintf(holds, sizeof holds, "%" PRId64, total);
        if (x->kind == HILOCK_INFO_COUNT || x->kind == HILOCK_INFO_PERMIT_SEMAPHORE)
            snprintf(permits, sizeof permits, "%" PRId64, x->count);
        fprintf(f, "%-10s %7" PRId64 " %5zu %10s %5s %7zu %7s  ", kind_word(x), waiters_of(x),
                x->nqueue, lease, holds, x->nholders, permits);
        int width = 40;
        if (x->nholders) {
            const hilock_holder_info *h = &x->holders[0];
            human_string(f, h->owner, h->owner_len);
            width -= (int)h->owner_len;
            if (x->nholders > 1) {
                width -= fprintf(f, " +%zu", x->nholders - 1);
            }
        } else {
            fputc('-', f);
            width -= 1;
        }
        fprintf(f, "%*s ", width > 0 ? width : 0, "");
        human_string(f, x->name, strlen(x->name));
        fputc('\n', f);
    }
}

/* One look: the matching names inspected, lock data only, sorted. 0, or
 * the exit status (reported). */
static int look(hilock_client *cl, const char *pattern, hilock_lock_info ***out, size_t *nout)
{
    char **names = NULL;
    size_t nnames = 0;
    *out = NULL;
    *nout = 0;
    int rc = hilock_scan_names(&names, &nnames, cl, pattern, 0);
    if (rc != 0) {
        cli_err("cannot scan for %s: %s", pattern, hilock_client_errmsg(cl));
        return rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    }
    hilock_lock_info **v = calloc(nnames ? nnames : 1, sizeof *v);
    if (!v) {
        hilock_names_free(names, nnames);
        cli_err("out of memory");
        return EXIT_UNAVAILABLE;
    }
    size_t n = 0;
    int status = 0;
    for (size_t k = 0; k < nnames; k++) {
        hilock_lock_info *x = NULL;
        rc = hilock_inspect(&x, cl, names[k]);
        if (rc != 0) {
            cli_err("cannot inspect %s: %s", names[k], hilock_client_errmsg(cl));
            status = rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
            break;
        }
        if (x->kind == HILOCK_INFO_NONE || x->kind == HILOCK_INFO_UNKNOWN)
            hilock_lock_info_free(x); /* gone meanwhile, or not lock data */
        else
            v[n++] = x;
    }
    hilock_names_free(names, nnames);
    qsort(v, n, sizeof *v, cmp_info);
    *out = v;
    *nout = n;
    return status;
}

static void free_look(hilock_lock_info **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hilock_lock_info_free(v[i]);
    free(v);
}

int cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"json", no_argument, 0, 'j'},
                                         {"once", no_argument, 0, '1'},
                                         {"sort", required_argument, 0, 's'},
                                         {"interval", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_TLS_OPTIONS,
                                         {0, 0, 0, 0}};
    const char *url = NULL;
    int json = 0, once = 0, c;
    int64_t interval_ms = 2000;
    sort_key = SORT_WAITERS;
    for (int first = 1; (c = cli_getopt(argc, argv, "hd:", opts, first)) != -1; first = 0) {
        if (c == CLI_OPT_BAD)
            return EXIT_USAGE;
        switch (c) {
        case 'u': url = optarg; break;
        case 'j': json = 1; break;
        case '1': once = 1; break;
        case 's':
            if (!strcmp(optarg, "waiters"))
                sort_key = SORT_WAITERS;
            else if (!strcmp(optarg, "lease"))
                sort_key = SORT_LEASE;
            else if (!strcmp(optarg, "name"))
                sort_key = SORT_NAME;
            else {
                cli_err("top: --sort wants waiters, lease or name, got '%s'", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'd':
            if (cli_parse_seconds(optarg, &interval_ms) != 0 || interval_ms < 100) {
                cli_err("top: --interval wants seconds >= 0.1, got '%s'", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': top_usage(stdout); return 0;
        default:
            cli_err("top: bad option '%s' (try: hilock top --help)", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (argc - optind > 1) {
        cli_err("top: one PATTERN at most (try: hilock top --help)");
        return EXIT_USAGE;
    }
    if (json && !once) {
        cli_err("top: --json goes with --once");
        return EXIT_USAGE;
    }
    const char *pattern = optind < argc ? argv[optind] : "*";
    char why[128];
    if (hilock_name_check(pattern, why, sizeof why)) {
        cli_err("top: bad PATTERN: %s", why);
        return EXIT_USAGE;
    }
    const char *full_url = cli_url(url);
    int code = 0;
    hilock_client *cl = cli_open(full_url, &code);
    if (!cl)
        return code == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    int tty = isatty(STDOUT_FILENO);
    int status = 0;
    for (;;) {
        hilock_lock_info **v = NULL;
        size_t n = 0;
        status = look(cl, pattern, &v, &n);
        if (status == 0) {
            if (json) {
                fputs("{\"version\":1,\"locks\":[", stdout);
                for (size_t i = 0; i < n; i++) {
                    if (i)
                        fputc(',', stdout);
                    print_lock_json(stdout, v[i]);
                }
                fputs("]}\n", stdout);
            } else {
                if (tty && !once)
                    fputs("\033[H\033[2J", stdout); /* home, clear: as top(1) */
                print_table(stdout, v, n, pattern, full_url);
            }
        }
        free_look(v, n);
        if (fflush(stdout) != 0 && status == 0)
            status = 1;
        if (once || status != 0)
            break;
        if (poll(NULL, 0, (int)interval_ms) < 0 && errno != EINTR)
            break;
    }
    hilock_client_close(cl);
    return status;
}
