/*
 * hilock command-line tool: shared declarations.
 */
#ifndef HILOCK_CLI_H
#define HILOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <getopt.h>
#include <stdio.h>

#include "hilock.h"

/* Exit statuses (documented in docs/cli.md and hilock.1). */
#define EXIT_CONFLICT_DEFAULT 1 /* run: not acquired within --wait */
#define EXIT_USAGE 2            /* bad command line */
#define EXIT_UNAVAILABLE 69     /* server unreachable, refused, protocol error */
#define EXIT_LOST 75            /* run: the lock was lost while the command ran */
#define EXIT_NOEXEC 126         /* run: command found but not executable */
#define EXIT_NOTFOUND 127       /* run: command not found */

#define DEFAULT_URL "redis://127.0.0.1:6379"

extern const char *progname; /* "hilock" */

/* Print "hilock: <msg>\n" to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The server URL: the option's value, else $HILOCK_URL, else DEFAULT_URL;
 * with the --tls-* options given so far appended as query parameters (the
 * engine's URL parser reads them; docs/urls.md). */
const char *cli_url(const char *opt);

/* --tls-ca FILE, --tls-ca-dir DIR, --tls-cert FILE, --tls-key FILE,
 * --tls-server-name NAME, --tls-insecure: every command takes them. */
enum { CLI_O_TLS_CA = 1000, CLI_O_TLS_CA_DIR, CLI_O_TLS_CERT, CLI_O_TLS_KEY,
       CLI_O_TLS_SNI, CLI_O_TLS_INSECURE };
#define CLI_TLS_OPTIONS                                                  \
    {"tls-ca", required_argument, 0, CLI_O_TLS_CA},                      \
    {"tls-ca-dir", required_argument, 0, CLI_O_TLS_CA_DIR},              \
    {"tls-cert", required_argument, 0, CLI_O_TLS_CERT},                  \
    {"tls-key", required_argument, 0, CLI_O_TLS_KEY},                    \
    {"tls-server-name", required_argument, 0, CLI_O_TLS_SNI},            \
    {"tls-insecure", no_argument, 0, CLI_O_TLS_INSECURE}
#define CLI_TLS_USAGE                                                              \
    "  --tls-ca FILE, --tls-ca-dir DIR   CAs to trust (rediss:// URLs)\n"          \
    "  --tls-cert FILE --tls-key FILE    client certificate (mutual TLS)\n"       \
    "  --tls-server-name NAME   name the server's certificate must carry\n"      \
    "  --tls-insecure           do not verify the server (tests only)\n"
/* 1 when c was a --tls-* option (recorded), 0 when it is not one, -1 on
 * an error (reported). */
int cli_tls_option(int c, const char *arg);
/* getopt_long over a subcommand's arguments (from the start when first is
 * set) that records the --tls-* options itself: the next other option, -1
 * at the end, CLI_OPT_BAD after a bad --tls-* option (reported). */
#define CLI_OPT_BAD (-2)
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *opts,
               int first);

/* Parse a duration in seconds ("10", "0.5", "1e-3") into ms (rounded up to
 * whole ms when positive and below 1 ms). 0 on success, -1 on a bad value. */
int cli_parse_seconds(const char *s, int64_t *ms);
/* Parse a non-negative decimal integer no larger than max. */
int cli_parse_uint(const char *s, long max, long *out);

/* Write s (len bytes) as a JSON string literal, quotes included. Control
 * characters are escaped; bytes that are not valid UTF-8 are written as
 * \u00XX (their Latin-1 reading) so the output is always valid JSON. */
void json_string(FILE *f, const char *s, size_t len);
/* Write s for a human: printable ASCII and valid UTF-8 as is, anything
 * else as \xNN. */
void human_string(FILE *f, const char *s, size_t len);

/* Monotonic clock in ms. */
int64_t cli_now_ms(void);

/* url as it may be printed: passwords shown as *** (hilock_url_redact);
 * a static buffer, cut with "..." past 1 KB. */
const char *cli_shown_url(const char *url);

/* A client for url (status, unlock), with the CLI's 2 s connect and command
 * timeouts. NULL with a one-line message printed on failure; *code gets the
 * hilock error code (HILOCK_EINVAL: the URL or a TLS option is bad). */
hilock_client *cli_open(const char *url, int *code);

/* ---- inspection output (status.c): docs/cli.md ---- */
void print_lock_human(FILE *f, const hilock_lock_info *v);
void print_lock_json(FILE *f, const hilock_lock_info *v);

/* Subcommands: return the process exit status. */
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_unlock(int argc, char **argv);
int cmd_top(int argc, char **argv);

#endif
