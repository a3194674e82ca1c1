/*
 * hilock status / hilock unlock --force: inspect lock data through the
 * library's hilock_inspect (one read-only script on the server that serves
 * the name), print it, and force-unlock with the handle of the kind found.
 * The kinds and how they are inferred: hilock.h, *Inspection*.
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hilock.h"

static void print_duration(FILE *f, int64_t ms)
{
    if (ms < 0)
        fprintf(f, "-");
    if (ms < 0)
        ms = -ms;
    if (ms < 10000)
        fprintf(f, "%" PRId64 ".%03" PRId64 " s", ms / 1000, ms % 1000);
    else if (ms < 3600 * 1000)
        fprintf(f, "%" PRId64 ".%01" PRId64 " s", ms / 1000, (ms % 1000) / 100);
    else
        fprintf(f, "%" PRId64 "h%02" PRId64 "m", ms / 3600000, (ms / 60000) % 60);
}

/* A semaphore's or latch's count (Redisson stores both as one integer,
 * so a count of 1 or more may be either; a latch at zero is deleted), or a
 * permit-expirable semaphore with its permits taken. */
static void print_count_human(FILE *f, const hilock_lock_info *v)
{
    if (v->kind == HILOCK_INFO_COUNT && v->count >= 1)
        fprintf(f, "semaphore or count-down latch, count %" PRId64
                   " (a semaphore's free permits, or a latch's count)\n",
                v->count);
    else if (v->kind == HILOCK_INFO_COUNT)
        fprintf(f, "semaphore, %" PRId64 " permits free\n", v->count);
    else
        fprintf(f, "permit-expirable semaphore, %" PRId64 " permits free, %zu taken\n",
                v->count, v->permits_taken);
    if (v->note[0])
        fprintf(f, "  note: %s\n", v->note);
    for (size_t i = 0; i < v->npermits; i++) {
        fprintf(f, "  permit %s  ", v->permits[i].id);
        int64_t left = v->permits[i].lease_end_ms - v->server_time_ms;
        if (v->permits[i].lease_end_ms < 0) {
            fputs("no lease\n", f);
        } else if (left <= 0) {
            fputs("lease ended (given back at the next use)\n", f);
        } else {
            fputs("lease ", f);
            print_duration(f, left);
            fputs(" left\n", f);
        }
    }
    if (v->npermits < v->permits_taken)
        fprintf(f, "  ... and %zu more\n", v->permits_taken - v->npermits);
}

void print_lock_human(FILE *f, const hilock_lock_info *v)
{
    fputs("lock ", f);
    human_string(f, v->name, strlen(v->name));
    fputs(": ", f);
    if (v->kind == HILOCK_INFO_NONE) {
        fputs("not locked\n", f);
        if (v->waiting > 0)
            fprintf(f, "  waiting %" PRId64 " (clients subscribed for a wake-up)\n", v->waiting);
        return;
    }
    if (v->kind == HILOCK_INFO_COUNT || v->kind == HILOCK_INFO_PERMIT_SEMAPHORE) {
        print_count_human(f, v);
        if (v->waiting > 0)
            fprintf(f, "  waiting %" PRId64 " (clients subscribed for a wake-up)\n", v->waiting);
        return;
    }
    fprintf(f, "%s, %s", hilock_info_kind_name(v->kind), v->locked ? "locked" : "not locked");
    if (v->kind == HILOCK_INFO_READWRITE && v->mode[0])
        fprintf(f, " (%s mode)", v->mode);
    if (v->locked) {
        if (v->lease_ms == -1) {
            fputs(", no expiry", f);
        } else if (v->lease_ms >= 0) {
            fputs(", lease ", f);
            print_duration(f, v->lease_ms);
            fputs(" left", f);
        }
    }
    if (v->token > 0)
        fprintf(f, ", fencing token %" PRId64, v->token);
    fputc('\n', f);
    if (v->note[0])
        fprintf(f, "  note: %s\n", v->note);
    for (size_t i = 0; i < v->nholders; i++) {
        fputs("  holder ", f);
        human_string(f, v->holders[i].owner, v->holders[i].owner_len);
        if (v->holders[i].holds >= 0)
            fprintf(f, "  holds %" PRId64 "\n", v->holders[i].holds);
        else
            fputs("  holds ?\n", f);
    }
    for (size_t i = 0; i < v->nqueue; i++) {
        fprintf(f, "  %s %2zu. ", i == 0 ? "queue " : "      ", i + 1);
        human_string(f, v->queue[i].owner, v->queue[i].owner_len);
        if (v->queue[i].deadline_ms >= 0 && v->server_time_ms > 0) {
            fputs("  deadline in ", f);
            print_duration(f, v->queue[i].deadline_ms - v->server_time_ms);
        } else {
            fputs("  no deadline", f);
        }
        fputc('\n', f);
    }
    if (v->waiting >= 0)
        fprintf(f, "  waiting %" PRId64 " (clients subscribed for a wake-up)\n", v->waiting);
}

/* Stable JSON schema (version 1), see docs/cli.md. */
void print_lock_json(FILE *f, const hilock_lock_info *v)
{
    fputs("{\"name\":", f);
    json_string(f, v->name, strlen(v->name));
    fprintf(f, ",\"kind\":\"%s\",\"locked\":%s,\"key_type\":", hilock_info_kind_name(v->kind),
            v->locked ? "true" : "false");
    json_string(f, v->key_type, strlen(v->key_type));
    fputs(",\"mode\":", f);
    if (v->mode[0])
        json_string(f, v->mode, strlen(v->mode));
    else
        fputs("null", f);
    fputs(",\"lease_ms\":", f);
    if (v->locked && v->lease_ms >= -1)
        fprintf(f, "%" PRId64, v->lease_ms);
    else
        fputs("null", f);
    fputs(",\"holders\":[", f);
    for (size_t i = 0; i < v->nholders; i++) {
        const hilock_holder_info *h = &v->holders[i];
        static const char *const roles[] = {"exclusive", "read", "write"};
        const char *role = (unsigned)h->role < 3 ? roles[h->role] : "exclusive";
        fputs(i ? ",{\"owner\":" : "{\"owner\":", f);
        json_string(f, h->owner, h->owner_len);
        fputs(",\"holds\":", f);
        if (h->holds >= 0)
            fprintf(f, "%" PRId64, h->holds);
        else
            fputs("null", f);
        fprintf(f, ",\"role\":\"%s\"}", role);
    }
    fputs("],\"queue\":[", f);
    for (size_t i = 0; i < v->nqueue; i++) {
        const hilock_waiter_info *w = &v->queue[i];
        fprintf(f, "%s{\"position\":%zu,\"owner\":", i ? "," : "", i + 1);
        json_string(f, w->owner, w->owner_len);
        if (w->deadline_ms >= 0)
            fprintf(f, ",\"deadline_ms\":%" PRId64 ",\"deadline_in_ms\":%" PRId64 "}",
                    w->deadline_ms, w->deadline_ms - v->server_time_ms);
        else
            fputs(",\"deadline_ms\":null,\"deadline_in_ms\":null}", f);
    }
    fputs("],\"count\":", f);
    if (v->kind == HILOCK_INFO_COUNT || v->kind == HILOCK_INFO_PERMIT_SEMAPHORE)
        fprintf(f, "%" PRId64, v->count);
    else
        fputs("null", f);
    fprintf(f, ",\"permits_taken\":%zu,\"permits\":[", v->permits_taken);
    for (size_t i = 0; i < v->npermits; i++) {
        const hilock_permit_info *p = &v->permits[i];
        fprintf(f, "%s{\"id\":\"%s\",", i ? "," : "", p->id); /* hex digits only */
        if (p->lease_end_ms >= 0)
            fprintf(f, "\"lease_end_ms\":%" PRId64 ",\"lease_in_ms\":%" PRId64 "}",
                    p->lease_end_ms, p->lease_end_ms - v->server_time_ms);
        else
            fputs("\"lease_end_ms\":null,\"lease_in_ms\":null}", f);
    }
    fputs("],\"waiting\":", f);
    if (v->waiting >= 0)
        fprintf(f, "%" PRId64, v->waiting);
    else
        fputs("null", f);
    fprintf(f, ",\"token\":%" PRId64 ",\"server_time_ms\":%" PRId64 ",\"note\":", v->token,
            v->server_time_ms);
    if (v->note[0])
        json_string(f, v->note, strlen(v->note));
    else
        fputs("null", f);
    fputc('}', f);
}

static void status_usage(FILE *f)
{
    fputs("Usage: hilock status [--url URL] [--json] NAME|PATTERN...\n"
          "(options anywhere on the line; \"--\" ends them: hilock status -- --odd-name)\n"
          "\n"
          "Show each lock's kind (reentrant, fair, read-write, fenced, count,\n"
          "permit-semaphore, unknown, or none when there is no lock data), holders with\n"
          "hold counts, remaining lease, the fair queue with each waiter's deadline,\n"
          "the clients waiting (subscribed for a wake-up) and the fencing token; a\n"
          "semaphore's free permits or a latch's count, a permit-expirable semaphore's\n"
          "permits with their leases. Works for data written by Redisson or any hilock\n"
          "binding. A NAME with *, ? or [ is a pattern (Redis SCAN MATCH; \\* for a\n"
          "literal *): every name that matches, on every master of a cluster.\n"
          "\n"
          "  --url URL   server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  --json      one JSON document: {\"version\":1,\"locks\":[...]}\n"
          "  -h, --help  this help\n"
          "\n"
          "Exit status: 0 ok, 2 usage error, 69 server unreachable or error.\n",
          f);
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_TLS_OPTIONS,
                                         {0, 0, 0, 0}};
    const char *url = NULL;
    int json = 0, c;
    for (int first = 1; (c = cli_getopt(argc, argv, "h", opts, first)) != -1; first = 0) {
        if (c == CLI_OPT_BAD)
            return EXIT_USAGE;
        switch (c) {
        case 'u': url = optarg; break;
        case 'j': json = 1; break;
        case 'h': status_usage(stdout); return 0;
        default:
            cli_err("status: bad option '%s' (try: hilock status --help)", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        cli_err("status: missing lock NAME (try: hilock status --help)");
        return EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++) {
        char why[128];
        if (hilock_name_check(argv[i], why, sizeof why)) {
            cli_err("status: bad lock name: %s", why);
            return EXIT_USAGE;
        }
    }
    int code = 0;
    hilock_client *cl = cli_open(cli_url(url), &code);
    if (!cl)
        return code == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    int status = 0, shown = 0;
    if (json)
        fputs("{\"version\":1,\"locks\":[", stdout);
    for (int i = optind; i < argc && status == 0; i++) {
        char **names = NULL;
        size_t nnames = 1;
        if (strpbrk(argv[i], "*?[")) { /* a pattern: every name that matches */
            int rc = hilock_scan_names(&names, &nnames, cl, argv[i], 0);
            if (rc != 0) {
                cli_err("cannot scan for %s: %s", argv[i], hilock_client_errmsg(cl));
                status = rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
                break;
            }
            if (nnames == 0 && !json) {
                fputs("no name matches ", stdout);
                human_string(stdout, argv[i], strlen(argv[i]));
                fputc('\n', stdout);
            }
        }
        for (size_t k = 0; k < nnames && status == 0; k++) {
            const char *name = names ? names[k] : argv[i];
            hilock_lock_info *v = NULL;
            int rc = hilock_inspect(&v, cl, name);
            if (rc != 0) {
                cli_err("cannot inspect %s: %s", name, hilock_client_errmsg(cl));
                status = rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
                break;
            }
            if (json) {
                if (shown)
                    fputc(',', stdout);
                print_lock_json(stdout, v);
            } else {
                print_lock_human(stdout, v);
            }
            shown++;
            hilock_lock_info_free(v);
        }
        hilock_names_free(names, names ? nnames : 0);
    }
    if (json && status == 0)
        fputs("]}\n", stdout);
    else if (json)
        fputc('\n', stdout);
    hilock_client_close(cl);
    if (fflush(stdout) != 0 && status == 0)
        status = 1;
    return status;
}

/* ---- unlock --force ---------------------------------------------------- */

static void unlock_usage(FILE *f)
{
    fputs("Usage: hilock unlock --force [--yes] [--url URL] NAME\n"
          "\n"
          "Delete the lock NAME whoever holds it and wake its waiters (the next fair\n"
          "waiter, or every waiter of a read-write lock). A holder using hilock's\n"
          "watchdog (hilock run) listens on the lock's channel and stops at once;\n"
          "others find the lock gone at their next renewal. Asks for confirmation\n"
          "when stdin is a terminal.\n"
          "\n"
          "  --force     required: a lock is normally released by its holder\n"
          "  -y, --yes   do not ask for confirmation\n"
          "  --url URL   server (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
          CLI_TLS_USAGE
          "  -h, --help  this help\n"
          "\n"
          "Exit status: 0 unlocked or nothing to unlock, 1 declined or the key is not\n"
          "a lock, 2 usage error, 69 server unreachable or error.\n",
          f);
}

/* Force-unlock name with a handle of the kind inspected: the library's
 * force scripts wake the right waiters (the next one, the fair head, or
 * every read-write waiter). */
static int force_unlock(hilock_client *cl, const hilock_lock_info *v, int *deleted)
{
    hilock_lock *l = NULL;
    hilock_rwlock *rw = NULL;
    int r;
    switch (v->kind) {
    case HILOCK_INFO_READWRITE:
        r = hilock_rwlock_new(&rw, cl, v->name);
        l = hilock_rwlock_write_lock(rw);
        break;
    case HILOCK_INFO_FAIR: r = hilock_fair_lock_new(&l, cl, v->name); break;
    default: r = hilock_lock_new(&l, cl, v->name); break;
    }
    if (r == 0)
        r = hilock_lock_force_unlock(deleted, l);
    if (r != 0)
        cli_err("force unlock of %s failed: %s: %s", v->name, hilock_strerror(r),
                l ? hilock_lock_errmsg(l) : hilock_client_errmsg(cl));
    if (rw)
        hilock_rwlock_free(rw);
    else
        hilock_lock_free(l);
    return r;
}

static void say_lock(const char *name, const char *what)
{
    fputs("lock ", stdout);
    human_string(stdout, name, strlen(name));
    fputs(what, stdout);
}

static int confirm(const hilock_lock_info *v)
{
    fputs("Force-unlock ", stderr);
    human_string(stderr, v->name, strlen(v->name));
    if (v->nholders) {
        fputs(" held by ", stderr);
        for (size_t i = 0; i < v->nholders; i++) {
            if (i)
                fputs(", ", stderr);
            human_string(stderr, v->holders[i].owner, v->holders[i].owner_len);
        }
    }
    if (v->nqueue)
        fprintf(stderr, " (%zu waiting)", v->nqueue);
    fputs("? [y/N] ", stderr);
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return line[0] == 'y' || line[0] == 'Y';
}

int cmd_unlock(int argc, char **argv)
{
    static const struct option opts[] = {{"url", required_argument, 0, 'u'},
                                         {"force", no_argument, 0, 'f'},
                                         {"yes", no_argument, 0, 'y'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_TLS_OPTIONS,
                                         {0, 0, 0, 0}};
    const char *url = NULL;
    int force = 0, yes = 0, c;
    for (int first = 1; (c = cli_getopt(argc, argv, "hy", opts, first)) != -1; first = 0) {
        if (c == CLI_OPT_BAD)
            return EXIT_USAGE;
        switch (c) {
        case 'u': url = optarg; break;
        case 'f': force = 1; break;
        case 'y': yes = 1; break;
        case 'h': unlock_usage(stdout); return 0;
        default:
            cli_err("unlock: bad option '%s' (try: hilock unlock --help)", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        cli_err("unlock: expected exactly one lock NAME (try: hilock unlock --help)");
        return EXIT_USAGE;
    }
    char why[128];
    if (hilock_name_check(argv[optind], why, sizeof why)) {
        cli_err("unlock: bad lock name: %s", why);
        return EXIT_USAGE;
    }
    if (!force) {
        cli_err("unlock: only --force is supported (a lock is released by its holder)");
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    int code = 0;
    hilock_client *cl = cli_open(cli_url(url), &code);
    if (!cl)
        return code == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    hilock_lock_info *v = NULL;
    int rc = hilock_inspect(&v, cl, name);
    if (rc != 0) {
        cli_err("cannot inspect %s: %s", name, hilock_client_errmsg(cl));
        hilock_client_close(cl);
        return rc == HILOCK_EINVAL ? EXIT_USAGE : EXIT_UNAVAILABLE;
    }
    int status = 0, deleted = 0;
    if (v->kind == HILOCK_INFO_NONE) {
        say_lock(name, " was not locked\n");
    } else if (v->kind == HILOCK_INFO_UNKNOWN) {
        cli_err("%s: %s; not touching it", name, v->note);
        status = 1;
    } else if (v->kind == HILOCK_INFO_COUNT || v->kind == HILOCK_INFO_PERMIT_SEMAPHORE) {
        cli_err("%s: a semaphore or count-down latch (%s), not a lock: its permits have no "
                "holder to unlock; not touching it",
                name, hilock_info_kind_name(v->kind));
        status = 1;
    } else if (!yes && isatty(STDIN_FILENO) && !confirm(v)) {
        cli_err("not unlocked");
        status = 1;
    } else if ((rc = force_unlock(cl, v, &deleted)) != 0) {
        status = rc == HILOCK_EWRONGTYPE ? 1 : EXIT_UNAVAILABLE;
    } else if (deleted) {
        say_lock(name, " force-unlocked\n");
    } else {
        say_lock(name, v->nqueue ? " was not locked (woke the next waiter)\n" : " was not locked\n");
    }
    hilock_lock_info_free(v);
    hilock_client_close(cl);
    return status;
}
