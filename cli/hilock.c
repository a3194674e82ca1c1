/*
 * hilock — command-line tool over the hilock library.
 *
 *   hilock run     run a command while holding a lock (flock(1) across machines)
 *   hilock status  show a lock's holders, lease and fair queue
 *   hilock unlock  force-unlock a lock
 *   hilock top     every matching lock, refreshed (top(1) for locks)
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hilock.h"

const char *progname = "hilock";

void cli_err(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static char tls_query[4096]; /* "&tls_ca_file=..." from the --tls-* options */

int cli_tls_option(int c, const char *arg)
{
    static const char *const names[] = {"tls_ca_file",   "tls_ca_dir",      "tls_cert_file",
                                        "tls_key_file",  "tls_server_name", "tls_insecure"};
    if (c < CLI_O_TLS_CA || c > CLI_O_TLS_INSECURE)
        return 0;
    if (c == CLI_O_TLS_INSECURE)
        arg = "1";
    size_t n = strlen(tls_query);
    int w = snprintf(tls_query + n, sizeof tls_query - n, "&%s=", names[c - CLI_O_TLS_CA]);
    if (w < 0 || (size_t)w >= sizeof tls_query - n)
        goto too_long;
    n += (size_t)w;
    for (const unsigned char *p = (const unsigned char *)arg; *p; p++) {
        if (n + 4 >= sizeof tls_query)
            goto too_long;
        if (isalnum(*p) || strchr("-._~/", *p))
            tls_query[n++] = (char)*p;
        else
            n += (size_t)snprintf(tls_query + n, 4, "%%%02X", *p);
    }
    tls_query[n] = 0;
    return 1;
too_long:
    cli_err("TLS options too long");
    return -1;
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *opts,
               int first)
{
    if (first) {
        opterr = 0;
        optind = 1;
    }
    for (;;) {
        int c = getopt_long(argc, argv, shortopts, opts, NULL);
        int t = c == -1 ? 0 : cli_tls_option(c, optarg);
        if (t < 0)
            return CLI_OPT_BAD;
        if (t == 0)
            return c;
    }
}

const char *cli_url(const char *opt)
{
    const char *url = DEFAULT_URL;
    const char *env = getenv("HILOCK_URL");
    if (opt && *opt)
        url = opt;
    else if (env && *env)
        url = env;
    if (!tls_query[0])
        return url;
    static char full[8192];
    snprintf(full, sizeof full, "%s%c%s", url, strchr(url, '?') ? '&' : '?', tls_query + 1);
    return full;
}

int cli_parse_seconds(const char *s, int64_t *ms)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return -1;
    double m = v * 1000.0;
    if (m > (double)HILOCK_MAX_TIME_MS)
        return -1;
    int64_t r = (int64_t)ceil(m);
    *ms = r;
    return 0;
}

int cli_parse_uint(const char *s, long max, long *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

int64_t cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

void json_string(FILE *f, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        switch (c) {
        case '"': fputs("\\\"", f); i++; continue;
        case '\\': fputs("\\\\", f); i++; continue;
        case '\n': fputs("\\n", f); i++; continue;
        case '\r': fputs("\\r", f); i++; continue;
        case '\t': fputs("\\t", f); i++; continue;
        case '\b': fputs("\\b", f); i++; continue;
        case '\f': fputs("\\f", f); i++; continue;
        default: break;
        }
        if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            i++;
            continue;
        }
        size_t n = utf8_len(s + i, len - i);
        if (n == 0) {
            fprintf(f, "\\u%04x", c); /* invalid byte: its Latin-1 reading */
            i++;
            continue;
        }
        fwrite(s + i, 1, n, f);
        i += n;
    }
    fputc('"', f);
}

void human_string(FILE *f, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            fputc(c, f);
            i++;
            continue;
        }
        if (c == '\\') {
            fputs("\\\\", f);
            i++;
            continue;
        }
        size_t n = c >= 0x80 ? utf8_len(s + i, len - i) : 0;
        if (n) {
            fwrite(s + i, 1, n, f);
            i += n;
        } else {
            fprintf(f, "\\x%02x", c);
            i++;
        }
    }
}

const char *cli_shown_url(const char *url)
{
    static char shown[1024];
    size_t n = hilock_url_redact(shown, sizeof shown, url);
    if (n >= sizeof shown)
        memcpy(shown + sizeof shown - 4, "...", 4);
    return shown;
}

hilock_client *cli_open(const char *url, int *code)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 2000;
    o.pool_size = 1;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, url, &o, err, sizeof err);
    if (rc == HILOCK_EINVAL)
        cli_err("bad server URL: %s", err[0] ? err : hilock_strerror(rc));
    else if (rc)
        cli_err("cannot connect to %s: %s", cli_shown_url(url), err[0] ? err : hilock_strerror(rc));
    *code = rc;
    return c;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: hilock [--version] [--help] COMMAND [ARGS...]\n"
            "\n"
            "Redis distributed locks (Redisson-compatible) from the shell.\n"
            "\n"
            "Commands:\n"
            "  run NAME -- COMMAND...   run COMMAND while holding the lock NAME\n"
            "  status NAME...           show holders, lease and fair queue of locks\n"
            "  unlock --force NAME      delete a lock whoever holds it, wake waiters\n"
            "  top [PATTERN]            every matching lock, its holders and waiters, live\n"
            "\n"
            "Every command takes --url URL (default: $HILOCK_URL, else %s)\n"
            "and --help. See hilock(1) or docs/cli.md.\n",
            DEFAULT_URL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("hilock %s\n", hilock_version_string());
        return 0;
    }
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "status"))
        return cmd_status(argc - 1, argv + 1);
    if (!strcmp(cmd, "unlock"))
        return cmd_unlock(argc - 1, argv + 1);
    if (!strcmp(cmd, "top"))
        return cmd_top(argc - 1, argv + 1);
    cli_err("unknown command '%s' (try: hilock --help)", cmd);
    return EXIT_USAGE;
}
