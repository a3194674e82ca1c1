/*
 * hilock run: run a command while holding a lock (flock(1) across machines).
 *
 * Threads and signals: INT, TERM, HUP, QUIT, USR1, USR2 and CHLD are blocked
 * in every thread (the mask is set before the library starts its threads)
 * and read from a signalfd by the main thread. The wait for the lock runs on
 * a helper thread so that a signal can end a long wait: for a fair lock the
 * waiter then leaves the queue instead of blocking it until its deadline.
 * The library's lost callback runs on its watchdog thread; it only sets a
 * flag and writes to an eventfd that wakes the main loop.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include "hilock.h"

enum { ON_LOST_KILL = 0, ON_LOST_WARN = 1 };

typedef struct run_opts {
    const char *url;
    int64_t wait_ms;  /* -1 forever */
    int64_t lease_ms; /* 0 watchdog */
    int64_t grace_ms;
    int64_t watchdog_lease_ms; /* 0 = library default */
    int fair;
    int mode;         /* 0 plain lock, 's' shared (read side), 'x' exclusive (write side),
                         'f' fenced */
    int conflict_code;
    int on_lost;
    int quiet;
    int stats;        /* --stats: print the run's figures on stderr at exit */
    const char *name;
    char **cmd;
    /* --semaphore NAME:PERMITS: a permit of the permit-expirable semaphore
     * NAME (Redisson RPermitExpirableSemaphore) instead of a lock */
    char *sem_name;   /* malloc'd */
    int64_t sem_permits;
    /* -c CMD (flock(1)'s spelling): COMMAND is "/bin/sh -c CMD" */
    char *sh_cmd[4];
} run_opts;

static void run_usage(FILE *f)
{
    fputs("Usage: hilock run [OPTIONS] NAME -- COMMAND [ARGS...]\n"
          "\n"
          "Acquire the lock NAME, run COMMAND, release the lock, and exit with\n"
          "COMMAND's status (128+N when it was killed by signal N).\n"
          "\n"
          "  --url URL                 server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  -w, --wait S, --timeout S give up after S seconds (0 = one try;\n"
          "                            default: wait forever)\n"
          "  -n, --nonblock            one try: as --wait 0 (flock(1)'s -n)\n"
          "  -c, --command CMD         run CMD with /bin/sh -c instead of COMMAND...\n"
          "                            (flock(1)'s -c): hilock run -n NAME -c 'make all'\n"
          "  --lease S                 fixed lease of S seconds instead of the watchdog\n"
          "                            (the lock is lost when the lease runs out)\n"
          "  --fair                    fair (FIFO) lock: waiters get it in arrival order\n"
          "  -s, --shared              shared: the read side of the read-write lock NAME\n"
          "                            (Redisson RReadWriteLock); many may hold it at once\n"
          "  -x, --exclusive           the write side of the read-write lock NAME: excludes\n"
          "                            every -s and -x holder\n"
          "  --fenced                  fenced lock (Redisson RFencedLock): COMMAND gets the\n"
          "                            grant's token in HILOCK_FENCING_TOKEN\n"
          "  --semaphore NAME:PERMITS  instead of a lock, one permit of the semaphore NAME\n"
          "                            (Redisson RPermitExpirableSemaphore; created with\n"
          "                            PERMITS permits if it does not exist): at most\n"
          "                            PERMITS commands run at once across hosts. The\n"
          "                            permit's lease is renewed while COMMAND runs (or\n"
          "                            fixed with --lease); COMMAND gets its id in\n"
          "                            HILOCK_PERMIT_ID. Usage: hilock run --semaphore\n"
          "                            NAME:PERMITS -- COMMAND\n"
          "  -E, --conflict-exit-code N  exit status when not acquired in time (default 1)\n"
          "  --on-lost=kill|warn       when the lock is lost while COMMAND runs: kill\n"
          "                            (default: SIGTERM, SIGKILL after --grace, exit 75)\n"
          "                            or warn (print a warning, keep running)\n"
          "  --grace S                 seconds between SIGTERM and SIGKILL (default 10)\n"
          "  --watchdog-lease S        watchdog lease (default 30; renewed every third)\n"
          "  -q, --quiet               no message when the lock is not acquired in time\n"
          "  --stats                   at exit, print one line of figures on stderr: the\n"
          "                            wait, the hold, how the lock came, its renewals and\n"
          "                            losses (format: docs/cli.md)\n"
          "  -h, --help                this help\n"
          "\n"
          "COMMAND runs with HILOCK_LOCK_NAME=NAME (and HILOCK_FENCING_TOKEN with\n"
          "--fenced) in its environment.\n"
          "\n"
          "Signals INT, TERM, HUP, QUIT, USR1, USR2 sent to hilock are forwarded to\n"
          "COMMAND; the lock is released after COMMAND exits.\n"
          "\n"
          "Exit status: COMMAND's status; 1 (or -E N) not acquired in time; 2 usage\n"
          "error; 69 server unreachable or error; 75 lock lost while COMMAND ran;\n"
          "126 COMMAND not executable; 127 COMMAND not found; 128+N killed by signal N.\n",
          f);
}

/* ---- shared state ------------------------------------------------------- */

static int wake_fd = -1;            /* eventfd: lost callback, acquire done */
static atomic_int lost_flag;        /* the watchdog found our hold gone */
static atomic_int acquire_done;

typedef struct acq_ctx {
    hilock_permit_semaphore *sem; /* --semaphore: acquire a permit instead */
    char permit[HILOCK_PERMIT_ID_SIZE];
    hilock_lock *lock;
    uint64_t tid;
    int64_t wait_ms, lease_ms;
    int rc;
    int64_t token; /* fenced lock: the grant's token */
} acq_ctx;

static void wake_main(void)
{
    uint64_t one = 1;
    ssize_t n = write(wake_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, the loop wakes anyway */
}

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    uint64_t mine = *(const uint64_t *)payload;
    if (tid != mine)
        return;
    atomic_store(&lost_flag, 1);
    wake_main();
}

/* A kept permit (hilock_permit_semaphore_keep) found gone or in doubt. */
static void on_permit_lost(hilock_permit_semaphore *s, const char *id, void *payload)
{
    (void)s;
    (void)id;
    (void)payload;
    atomic_store(&lost_flag, 1);
    wake_main();
}

static void *acquire_thread(void *arg)
{
    acq_ctx *a = arg;
    if (a->sem)
        a->rc = hilock_permit_semaphore_acquire_tid(a->permit, a->sem, a->tid, a->wait_ms,
                                                    a->lease_ms);
    else
        a->rc = hilock_lock_acquire_token_tid(&a->token, a->lock, a->tid, a->wait_ms,
                                              a->lease_ms);
    atomic_store(&acquire_done, 1);
    wake_main();
    return NULL;
}

static void drain(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
}

/* Mark every descriptor opened since start-up close-on-exec, so that the
 * command does not inherit the library's sockets and our signalfd/eventfd.
 * Descriptors the caller handed us (fd 3 and up at start-up) stay. */
static unsigned char *startup_fds;
static int startup_nfds;

static void record_startup_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int maxfd = 1024;
    startup_fds = calloc((size_t)maxfd, 1);
    if (!startup_fds) {
        closedir(d);
        return;
    }
    startup_nfds = maxfd;
    struct dirent *e;
    int self = dirfd(d);
    while ((e = readdir(d)) != NULL) {
        long fd = strtol(e->d_name, NULL, 10);
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == self)
            continue;
        if (fd < maxfd)
            startup_fds[fd] = 1;
    }
    closedir(d);
}

static void cloexec_new_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        long fd = strtol(e->d_name, NULL, 10);
        if (fd <= 2 || fd == self)
            continue;
        if (startup_fds && fd < startup_nfds && startup_fds[fd])
            continue;
        int fl = fcntl((int)fd, F_GETFD);
        if (fl >= 0 && !(fl & FD_CLOEXEC))
            fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
    }
    closedir(d);
}

/* ---- option parsing ------------------------------------------------------ */

enum { O_URL = 256, O_LEASE, O_FAIR, O_ONLOST, O_GRACE, O_WDLEASE, O_FENCED, O_SEM, O_STATS };

/* One option c (with its value arg; opt: how it was written, for messages)
 * into o: 0, 1 for --help, -1 on a bad value (reported). */
static int run_option(run_opts *o, int c, const char *arg, const char *opt)
{
    long n;
    switch (c) {
    case O_URL: o->url = arg; break;
    case 'w':
        if (cli_parse_seconds(arg, &o->wait_ms) != 0) {
            cli_err("run: --wait wants seconds >= 0, got '%s'", arg);
            return -1;
        }
        break;
    case O_LEASE:
        if (cli_parse_seconds(arg, &o->lease_ms) != 0 || o->lease_ms <= 0) {
            cli_err("run: --lease wants seconds > 0, got '%s'", arg);
            return -1;
        }
        break;
    case O_FAIR: o->fair = 1; break;
    case O_SEM: {
        const char *colon = strrchr(arg, ':');
        if (o->sem_name || !colon || colon == arg ||
            cli_parse_uint(colon + 1, 2147483647, &n) != 0 || n < 1) {
            cli_err("run: --semaphore wants NAME:PERMITS (PERMITS 1..2147483647), got '%s'",
                    arg);
            return -1;
        }
        o->sem_name = strndup(arg, (size_t)(colon - arg));
        o->sem_permits = n;
        if (!o->sem_name)
            return -1;
        break;
    }
    case 's':
    case 'x':
    case O_FENCED:
        if (o->mode) {
            cli_err("run: -s, -x and --fenced exclude each other");
            return -1;
        }
        o->mode = c == O_FENCED ? 'f' : c;
        break;
    case 'E':
        if (cli_parse_uint(arg, 255, &n) != 0) {
            cli_err("run: --conflict-exit-code wants 0..255, got '%s'", arg);
            return -1;
        }
        o->conflict_code = (int)n;
        break;
    case O_ONLOST:
        if (!strcmp(arg, "kill")) {
            o->on_lost = ON_LOST_KILL;
        } else if (!strcmp(arg, "warn")) {
            o->on_lost = ON_LOST_WARN;
        } else {
            cli_err("run: --on-lost wants kill or warn, got '%s'", arg);
            return -1;
        }
        break;
    case O_GRACE:
        if (cli_parse_seconds(arg, &o->grace_ms) != 0) {
            cli_err("run: --grace wants seconds >= 0, got '%s'", arg);
            return -1;
        }
        break;
    case O_WDLEASE:
        if (cli_parse_seconds(arg, &o->watchdog_lease_ms) != 0 ||
            o->watchdog_lease_ms < 30) {
            cli_err("run: --watchdog-lease wants seconds >= 0.03, got '%s'", arg);
            return -1;
        }
        break;
    case 'q': o->quiet = 1; break;
    case O_STATS: o->stats = 1; break;
    case 'n': o->wait_ms = 0; break;
    case 'c':
        o->sh_cmd[0] = "/bin/sh";
        o->sh_cmd[1] = "-c";
        o->sh_cmd[2] = (char *)arg;
        o->sh_cmd[3] = NULL;
        break;
    case 'h': return 1;
    case ':':
        cli_err("run: option '%s' needs a value", opt);
        return -1;
    default:
        cli_err("run: bad option '%s' (try: hilock run --help)", opt);
        return -1;
    }
    return 0;
}

/* After the options: the combinations, NAME and COMMAND. 0 or -1 (reported). */
static int run_operands(run_opts *o, int argc, char **argv)
{
    if (o->fair && o->mode) {
        cli_err("run: --fair is a lock of its own; it does not combine with -s, -x or --fenced");
        return -1;
    }
    if (o->sem_name && (o->fair || o->mode)) {
        cli_err("run: --semaphore does not combine with --fair, -s, -x or --fenced");
        return -1;
    }
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++; /* "hilock run -- NAME -- CMD" */
    if (o->sem_name) { /* the name came with the option: COMMAND follows */
        o->name = o->sem_name;
        if (o->sh_cmd[0]) {
            if (optind < argc) {
                cli_err("run: -c CMD and COMMAND... exclude each other");
                return -1;
            }
            o->cmd = o->sh_cmd;
            return 0;
        }
        if (optind >= argc) {
            cli_err("run: missing COMMAND (hilock run --semaphore NAME:PERMITS -- COMMAND...)");
            return -1;
        }
        o->cmd = argv + optind;
        return 0;
    }
    if (optind >= argc) {
        cli_err("run: missing lock NAME (try: hilock run --help)");
        return -1;
    }
    o->name = argv[optind++];
    if (o->sh_cmd[0]) { /* -c CMD: nothing may follow NAME */
        if (optind < argc) {
            cli_err("run: -c CMD and COMMAND... exclude each other");
            return -1;
        }
        o->cmd = o->sh_cmd;
    }
    char why[128];
    if (hilock_name_check(o->name, why, sizeof why)) {
        cli_err("run: bad lock name: %s", why);
        return -1;
    }
    if (o->cmd)
        return 0;
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    if (optind >= argc) {
        cli_err("run: missing COMMAND after NAME (hilock run NAME -- COMMAND...)");
        return -1;
    }
    o->cmd = argv + optind;
    return 0;
}

static int parse_run_opts(int argc, char **argv, run_opts *o, int *exit_now)
{
    static const struct option lopts[] = {{"url", required_argument, 0, O_URL},
                                          {"wait", required_argument, 0, 'w'},
                                          {"timeout", required_argument, 0, 'w'},
                                          {"nonblock", no_argument, 0, 'n'},
                                          {"command", required_argument, 0, 'c'},
                                          {"lease", required_argument, 0, O_LEASE},
                                          {"fair", no_argument, 0, O_FAIR},
                                          {"shared", no_argument, 0, 's'},
                                          {"exclusive", no_argument, 0, 'x'},
                                          {"fenced", no_argument, 0, O_FENCED},
                                          {"semaphore", required_argument, 0, O_SEM},
                                          {"conflict-exit-code", required_argument, 0, 'E'},
                                          {"on-lost", required_argument, 0, O_ONLOST},
                                          {"grace", required_argument, 0, O_GRACE},
                                          {"watchdog-lease", required_argument, 0, O_WDLEASE},
                                          {"quiet", no_argument, 0, 'q'},
                                          {"stats", no_argument, 0, O_STATS},
                                          {"help", no_argument, 0, 'h'},
                                          CLI_TLS_OPTIONS,
                                          {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->wait_ms = -1;
    o->grace_ms = 10000;
    o->conflict_code = EXIT_CONFLICT_DEFAULT;
    *exit_now = -1;
    /* Options before NAME and between NAME and COMMAND (GNU getopt stops at
     * the first operand: "+"); COMMAND's own options are never read. */
    int c, name_at = -1;
    for (int first = 1;; first = 0) {
        c = cli_getopt(argc, argv, "+w:E:c:nqhsx", lopts, first);
        if (c == -1) {
            /* NAME (not after "--", not with --semaphore): read on */
            if (name_at < 0 && !o->sem_name && optind < argc && strcmp(argv[optind - 1], "--") &&
                strcmp(argv[optind], "--")) {
                name_at = optind++;
                continue;
            }
            break;
        }
        int r = c == CLI_OPT_BAD ? -1 : run_option(o, c, optarg, argv[optind - 1]);
        if (r < 0)
            return -1;
        if (r > 0) {
            run_usage(stdout);
            *exit_now = 0;
            return 0;
        }
    }
    if (name_at >= 0) { /* give NAME back to the operands, in its place */
        char *name = argv[name_at];
        memmove(argv + name_at, argv + name_at + 1, (size_t)(optind - 1 - name_at) * sizeof *argv);
        argv[--optind] = name;
    }
    return run_operands(o, argc, argv);
}

/* ---- the command ---------------------------------------------------------- */

static pid_t spawn(char **cmd, const sigset_t *oldmask)
{
    cloexec_new_fds();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* child: only async-signal-safe calls until exec */
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    execvp(cmd[0], cmd);
    int e = errno;
    static const char pre[] = "hilock: cannot run '";
    ssize_t w = write(STDERR_FILENO, pre, sizeof pre - 1);
    w = write(STDERR_FILENO, cmd[0], strlen(cmd[0]));
    const char *why = e == ENOENT ? "': command not found\n" : "': not executable\n";
    w = write(STDERR_FILENO, why, strlen(why));
    (void)w;
    _exit(e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC);
}

/* A signal ended the wait: cancel the helper thread's acquire (public API;
 * it leaves the fair queue and its subscription itself) and wait for it to
 * return. It may not have started waiting yet, so ask until it is done. */
static void cancel_wait(const acq_ctx *a)
{
    while (!atomic_load(&acquire_done)) {
        int found = 0;
        if (a->sem)
            hilock_permit_semaphore_cancel(&found, a->sem, a->tid);
        else
            hilock_lock_cancel(&found, a->lock, a->tid);
        struct pollfd p = {wake_fd, POLLIN, 0};
        if (poll(&p, 1, found ? -1 : 1) > 0) /* the helper writes wake_fd when done */
            drain(wake_fd);
    }
}

/* The lock handle, or the read-write lock owning it. */
static void free_lock(hilock_lock *lock, hilock_rwlock *rw)
{
    if (rw)
        hilock_rwlock_free(rw);
    else
        hilock_lock_free(lock);
}

static int exit_status_of(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return 1;
}

/* Everything one `hilock run` works with, passed between its steps. */
typedef struct run_state {
    run_opts o;
    int sfd;                 /* signalfd of the handled signals */
    sigset_t oldmask;        /* the mask to restore in the command */
    hilock_client *client;
    hilock_lock *lock;
    hilock_rwlock *rw;       /* owner of lock for -s / -x */
    uint64_t tid;            /* the owner's thread id: our pid */
    int64_t token;           /* fenced lock: the grant's token */
    hilock_permit_semaphore *sem; /* --semaphore: the semaphore instead of lock */
    char permit[HILOCK_PERMIT_ID_SIZE]; /* and the permit taken */
    int64_t permit_lease;    /* its lease: fixed, or the watchdog lease renewed
                                (the client's watchdog keeps it:
                                hilock_permit_semaphore_keep) */
    int interrupted;         /* the signal that ended the wait, or 0 */
    int lost;                /* the hold was lost while the command ran */
    int child_status;
    /* --stats: the acquire's code and times (monotonic ms; held_at -1 when
     * not granted) */
    int acquire_rc;
    int64_t wait_from, wait_end, held_at, hold_end;
} run_state;

/* Block the forwarded signals and SIGCHLD in every thread (before the
 * library starts any) and read them from a signalfd; the wake-up eventfd. */
static int setup_signals(run_state *st)
{
    sigset_t set;
    sigemptyset(&set);
    int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
        sigaddset(&set, fwd[i]);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, &st->oldmask);
    st->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->sfd < 0 || wake_fd < 0) {
        cli_err("cannot set up signal handling: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* The client and the handle of the kind asked for. 0, or the exit status. */
static int open_lock(run_state *st, const char *url)
{
    const run_opts *o = &st->o;
    hilock_options hopts;
    hilock_options_init(&hopts, HILOCK_OPTIONS_VERSION);
    if (o->watchdog_lease_ms > 0)
        hopts.watchdog_lease_ms = o->watchdog_lease_ms;
    char err[256] = "";
    int rc = hilock_client_open(&st->client, url, &hopts, err, sizeof err);
    if (rc != 0) {
        cli_err("cannot connect to %s: %s", cli_shown_url(url), err[0] ? err : hilock_strerror(rc));
        return rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE; /* a bad URL is usage */
    }
    if (o->sem_name) {
        rc = hilock_permit_semaphore_new(&st->sem, st->client, o->name);
        if (rc == 0) {
            int src = hilock_permit_semaphore_try_set_permits(NULL, st->sem, o->sem_permits);
            if (src != 0) {
                cli_err("cannot set up semaphore %s: %s (%s)", o->name, hilock_strerror(src),
                        hilock_permit_semaphore_errmsg(st->sem));
                hilock_permit_semaphore_free(st->sem);
                hilock_client_close(st->client);
                return src == HILOCK_EWRONGTYPE ? 1 : EXIT_UNAVAILABLE;
            }
        }
        int64_t wd = o->watchdog_lease_ms > 0 ? o->watchdog_lease_ms : 30000;
        st->permit_lease = o->lease_ms > 0 ? o->lease_ms : wd;
    } else if (o->mode == 's' || o->mode == 'x') {
        rc = hilock_rwlock_new(&st->rw, st->client, o->name);
        if (rc == 0)
            st->lock = o->mode == 's' ? hilock_rwlock_read_lock(st->rw)
                                      : hilock_rwlock_write_lock(st->rw);
    } else {
        rc = o->fair           ? hilock_fair_lock_new(&st->lock, st->client, o->name)
             : o->mode == 'f' ? hilock_fenced_lock_new(&st->lock, st->client, o->name)
                              : hilock_lock_new(&st->lock, st->client, o->name);
    }
    if (rc != 0) {
        cli_err("bad lock name: %s", hilock_client_errmsg(st->client)); /* says why */
        hilock_client_close(st->client);
        return EXIT_USAGE;
    }
    return 0;
}

static void close_lock(run_state *st)
{
    if (st->sem)
        hilock_permit_semaphore_free(st->sem);
    else
        free_lock(st->lock, st->rw);
    hilock_client_close(st->client);
}

/* Release the hold (or give the permit back): the call's code. */
static int give_back(run_state *st)
{
    int rc = st->sem ? hilock_permit_semaphore_release(st->sem, st->permit)
                     : hilock_lock_release_tid(st->lock, st->tid);
    st->hold_end = cli_now_ms();
    return rc;
}

static const char *kind_word(const run_state *st)
{
    const run_opts *o = &st->o;
    return o->sem_name      ? "semaphore"
           : o->fair        ? "fair"
           : o->mode == 's' ? "read"
           : o->mode == 'x' ? "write"
           : o->mode == 'f' ? "fenced"
                            : "reentrant";
}

/* --stats: one line on stderr (docs/cli.md, "Statistics"): what this run's
 * acquire and hold came to, from its own clock and the client's counters
 * (hilock_client_stats; a kept permit's renewals are the watchdog's). Called once
 * the acquire has returned, before the client is closed. */
static void print_stats(run_state *st)
{
    if (!st->o.stats)
        return;
    hilock_stats s;
    memset(&s, 0, sizeof s);
    s.version = HILOCK_STATS_VERSION;
    if (hilock_client_stats(st->client, &s) != 0)
        memset(&s, 0, sizeof s);
    int rc = st->acquire_rc;
    const char *outcome = rc == 0                                       ? "granted"
                          : rc == HILOCK_ETIMEDOUT && st->o.wait_ms == 0 ? "busy"
                          : rc == HILOCK_ETIMEDOUT                       ? "timed_out"
                          : rc == HILOCK_ECANCELED                       ? "cancelled"
                                                                         : "error";
    const hilock_kind_stats *k = NULL;
    if (!st->sem) {
        hilock_kind kind = hilock_lock_kind(st->lock);
        if ((unsigned)kind < HILOCK_STATS_KINDS)
            k = &s.kind[kind];
    }
    uint64_t renewals = s.renewals, failures = s.renewal_failures;
    const char *path = rc != 0 || !k             ? "-"
                       : k->granted_first_try     ? "first_try"
                       : k->granted_woken         ? "woken"
                       : k->granted_retried       ? "retried"
                                                  : "-";
    char hold[24] = "-";
    if (st->held_at >= 0)
        snprintf(hold, sizeof hold, "%lld",
                 (long long)((st->hold_end >= st->held_at ? st->hold_end : cli_now_ms()) -
                             st->held_at));
    int64_t waited = st->wait_end - st->wait_from;
    fflush(stdout);
    fprintf(stderr,
            "%s: stats: kind=%s outcome=%s path=%s wait_ms=%lld hold_ms=%s renewals=%llu "
            "renewal_failures=%llu lost=%d lost_gone=%llu lost_expired=%llu "
            "lost_in_doubt=%llu settles=%llu reconnects=%llu redirects=%llu name=",
            progname, kind_word(st), outcome, path, (long long)(waited > 0 ? waited : 0), hold,
            (unsigned long long)renewals, (unsigned long long)failures, st->lost,
            (unsigned long long)(k ? k->lost_gone : 0),
            (unsigned long long)(k ? k->lost_expired : 0),
            (unsigned long long)(k ? k->lost_in_doubt : 0), (unsigned long long)s.settles,
            (unsigned long long)s.reconnects, (unsigned long long)s.redirects);
    json_string(stderr, st->o.name, strlen(st->o.name));
    fputc('\n', stderr);
}

/* The run is over (the acquire returned): --stats, then the handles. */
static void finish(run_state *st)
{
    print_stats(st);
    close_lock(st);
}

static const char *hold_errmsg(const run_state *st)
{
    return st->sem ? hilock_permit_semaphore_errmsg(st->sem) : hilock_lock_errmsg(st->lock);
}

/* Acquire on a helper thread while this one watches the signals: a signal
 * cancels the wait (st->interrupted). Returns the acquire's code. */
static int acquire_interruptible(run_state *st)
{
    static uint64_t lost_tid; /* the lost callback's payload */
    lost_tid = st->tid;
    if (st->lock)
        hilock_lock_set_lost_callback(st->lock, on_lost, &lost_tid);
    acq_ctx a = {st->sem, "", st->lock, st->tid, st->o.wait_ms,
                 st->sem ? st->permit_lease : st->o.lease_ms, 0, 0};
    st->wait_from = cli_now_ms();
    st->held_at = -1;
    pthread_t th;
    if (pthread_create(&th, NULL, acquire_thread, &a) != 0) {
        st->wait_end = cli_now_ms();
        st->acquire_rc = HILOCK_ENOMEM;
        cli_err("cannot start a thread");
        return HILOCK_ENOMEM;
    }
    while (!atomic_load(&acquire_done) && !st->interrupted) {
        struct pollfd p[2] = {{st->sfd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents & POLLIN)
            drain(wake_fd);
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(st->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo != SIGCHLD)
                    st->interrupted = (int)si.ssi_signo;
            }
        }
    }
    if (st->interrupted)
        cancel_wait(&a);
    pthread_join(th, NULL);
    st->wait_end = cli_now_ms();
    if (a.rc == 0)
        st->held_at = st->wait_end;
    st->acquire_rc = a.rc;
    st->token = a.token;
    memcpy(st->permit, a.permit, sizeof st->permit);
    return a.rc;
}

/* What a failed or interrupted acquire means for the exit status: 0 when
 * the lock is held and the command may run, else the status (the lock
 * and client are closed then). */
static int acquire_outcome(run_state *st, int rc)
{
    const run_opts *o = &st->o;
    int status = 0;
    if (rc == HILOCK_ECANCELED) {
        if (!o->quiet)
            cli_err("interrupted while waiting for lock %s", o->name);
        status = 128 + st->interrupted;
    } else if (rc == HILOCK_ETIMEDOUT && st->sem) {
        if (!o->quiet)
            cli_err("no permit of semaphore %s free; not acquired%s", o->name,
                    o->wait_ms == 0 ? "" : " within --wait");
        status = o->conflict_code;
    } else if (rc == HILOCK_ETIMEDOUT) {
        if (!o->quiet)
            cli_err("lock %s is held by another owner; not acquired%s", o->name,
                    o->wait_ms == 0 ? "" : " within --wait");
        status = o->conflict_code;
    } else if (rc == HILOCK_ENOMEM && !atomic_load(&acquire_done)) {
        status = EXIT_UNAVAILABLE; /* no helper thread */
    } else if (rc != 0) {
        cli_err("cannot acquire %s: %s (%s)", o->name, hilock_strerror(rc), hold_errmsg(st));
        status = rc == HILOCK_EWRONGTYPE ? 1 : EXIT_UNAVAILABLE;
    } else if (st->interrupted) {
        /* acquired at the moment the signal came: give it back */
        give_back(st);
        status = 128 + st->interrupted;
    }
    if (status)
        finish(st);
    return status;
}

/* With a fixed lease there is no watchdog: when to check the lease next
 * (monotonic ms), or -1. A permit is kept by the client's watchdog
 * (renewed with the watchdog lease, or its fixed lease given again from
 * now, and listened for on the semaphore's channel): -2 when it cannot
 * be (not taken any more, say). */
static int64_t first_lease_check(run_state *st)
{
    if (st->sem) { /* a fixed lease ends; a watchdog lease is renewed */
        int64_t now = cli_now_ms();
        int64_t fixed = st->o.lease_ms > 0 ? st->o.lease_ms : 0;
        if (hilock_permit_semaphore_keep(st->sem, st->permit, fixed, on_permit_lost, NULL) != 0)
            return -2;
        return fixed ? now + fixed : -1;
    }
    if (st->o.lease_ms <= 0)
        return -1;
    int64_t left = 0;
    if (hilock_lock_remaining_ms(&left, st->lock) == 0 && left >= 0)
        return cli_now_ms() + left + 5;
    return cli_now_ms() + st->o.lease_ms;
}

/* The command's environment names the lock and, fenced, the token (as
 * etcdctl lock passes ETCD_LOCK_REV) so that it can fence its own writes. */
static void set_command_env(const run_state *st)
{
    char tokbuf[24];
    snprintf(tokbuf, sizeof tokbuf, "%lld", (long long)st->token);
    if (setenv("HILOCK_LOCK_NAME", st->o.name, 1) != 0 ||
        (st->o.mode == 'f' && setenv("HILOCK_FENCING_TOKEN", tokbuf, 1) != 0) ||
        (st->sem && setenv("HILOCK_PERMIT_ID", st->permit, 1) != 0))
        cli_err("warning: cannot set the command's environment: %s", strerror(errno));
}

/* Forward the signals other processes sent us to the command. Signals from
 * the terminal (Ctrl-C, hangup) already reach it, as it shares our process
 * group; the ones sent to us (kill, systemd, timeout) are passed on. */
static void forward_signals(int sfd, pid_t pid)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGCHLD && si.ssi_code != SI_KERNEL)
            kill(pid, (int)si.ssi_signo);
    }
}

/* A fixed lease is due: is the hold still there? Returns the next check. */
static int64_t check_lease(const run_state *st, int64_t now)
{
    if (st->sem) { /* a permit's fixed lease has ended */
        atomic_store(&lost_flag, 1);
        return -1;
    }
    int held = 1;
    int q = hilock_lock_is_held_tid(&held, st->lock, st->tid);
    if (q == 0 && !held) {
        atomic_store(&lost_flag, 1);
        return -1;
    }
    int64_t left = 0;
    if (q == 0 && hilock_lock_remaining_ms(&left, st->lock) == 0 && left > 0)
        return now + left + 5;
    return now + 1000; /* server trouble: look again soon */
}

/* poll timeout until the earliest of the two times (-1 = none). */
static int poll_timeout(int64_t now, int64_t a, int64_t b)
{
    int64_t next = a;
    if (b >= 0 && (next < 0 || b < next))
        next = b;
    if (next < 0)
        return -1;
    return next <= now ? 0 : (int)((next - now) > 60000 ? 60000 : next - now);
}

/* Run until the command exits: forward signals, watch for the loss of the
 * lock (watchdog callback, or the fixed lease's own checks) and act on it. */
static void supervise(run_state *st, pid_t pid, int64_t lease_check_at)
{
    const run_opts *o = &st->o;
    int64_t kill_at = -1;
    for (;;) {
        int64_t now = cli_now_ms();
        struct pollfd p[2] = {{st->sfd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
        int64_t due = lease_check_at;
        if (poll(p, 2, poll_timeout(now, kill_at, st->lost ? -1 : due)) < 0 &&
            errno != EINTR)
            break;
        if (p[0].revents & POLLIN)
            forward_signals(st->sfd, pid);
        if (p[1].revents & POLLIN)
            drain(wake_fd);
        now = cli_now_ms();
        if (!st->lost && lease_check_at >= 0 && now >= lease_check_at)
            lease_check_at = check_lease(st, now);
        if (!st->lost && atomic_load(&lost_flag)) {
            st->lost = 1;
            if (o->on_lost == ON_LOST_KILL) {
                cli_err("lock %s was lost while the command was running; stopping it", o->name);
                kill(pid, SIGTERM);
                kill_at = now + o->grace_ms;
            } else {
                cli_err("warning: lock %s was lost while the command is running", o->name);
            }
        }
        if (kill_at >= 0 && now >= kill_at) {
            kill(pid, SIGKILL);
            kill_at = -1;
        }
        pid_t w = waitpid(pid, &st->child_status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
    }
}

/* Release after the command; a hold already gone counts as lost. */
static void release_after(run_state *st)
{
    const run_opts *o = &st->o;
    int rc = give_back(st);
    if (rc == HILOCK_ENOTOWNER && !st->lost) {
        st->lost = 1;
        cli_err("%slock %s was no longer held when the command finished (lease ran out "
                "or it was force-unlocked)",
                o->on_lost == ON_LOST_WARN ? "warning: " : "", o->name);
    } else if (rc != 0 && rc != HILOCK_ENOTOWNER) {
        cli_err("could not release %s: %s (%s); it expires after its lease", o->name,
                hilock_strerror(rc), hold_errmsg(st));
    }
}

/* The steps of one run; every early return leaves the freeing to cmd_run. */
static int run_steps(run_state *st, int argc, char **argv)
{
    int exit_now;
    if (parse_run_opts(argc, argv, &st->o, &exit_now) != 0)
        return EXIT_USAGE;
    if (exit_now >= 0)
        return exit_now;
    record_startup_fds();
    if (setup_signals(st) != 0)
        return EXIT_UNAVAILABLE;
    int status = open_lock(st, cli_url(st->o.url));
    if (status)
        return status;
    /* The owner is "<client-uuid>:<pid>": status shows which process holds it. */
    st->tid = (uint64_t)getpid();
    if ((status = acquire_outcome(st, acquire_interruptible(st))) != 0)
        return status;
    int64_t lease_check_at = first_lease_check(st);
    if (lease_check_at == -2) {
        cli_err("cannot keep the permit of semaphore %s: %s", st->o.name, hold_errmsg(st));
        give_back(st);
        finish(st);
        return EXIT_UNAVAILABLE;
    }
    set_command_env(st);
    pid_t pid = spawn(st->o.cmd, &st->oldmask);
    if (pid < 0) {
        cli_err("cannot start the command: %s", strerror(errno));
        give_back(st);
        finish(st);
        return EXIT_UNAVAILABLE;
    }
    supervise(st, pid, lease_check_at);
    release_after(st);
    finish(st);
    if (st->lost && st->o.on_lost == ON_LOST_KILL)
        return EXIT_LOST;
    return exit_status_of(st->child_status);
}

int cmd_run(int argc, char **argv)
{
    run_state st;
    memset(&st, 0, sizeof st);
    int status = run_steps(&st, argc, argv);
    free(startup_fds);
    free(st.o.sem_name);
    return status;
}
