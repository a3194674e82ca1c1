/* The C tests' fault proxy (proxy.h). */
#define _GNU_SOURCE
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { RULE_MAX = 8, PAT_MAX = 128, CONN_MAX = 256 };

typedef struct chunk {
    struct chunk *next;
    int64_t at;     /* deliver then (monotonic ms) */
    int reset;      /* reset the connection once delivered */
    int fires;      /* delivering it completes a rule */
    size_t len;
    char data[];
} chunk;

typedef struct rule {
    int kind; /* 1 late reply then reset, 2 hold request, 3 late reply */
    char pat[PAT_MAX];
    int delay_ms;
} rule;

typedef struct pconn {
    th_proxy *p;
    pthread_t th;
    int cfd, sfd;
    int kill; /* th_proxy_reset: reset both ways (under the proxy's mu) */
    /* under the proxy's mu: */
    int subscriber;         /* a request of it contained "SUBSCRIBE" */
    int drop_up, drop_down; /* th_proxy_silence_subscribers */
    int done;               /* conn_main returned */
} pconn;

struct th_proxy {
    int port, target, lfd, stop;
    char url[64];
    pthread_t acceptor;
    pthread_mutex_t mu;
    rule rules[RULE_MAX];
    int nrules, fired;
    pconn *conns[CONN_MAX];
    int nconns;
    int drop_up, drop_down, stalling, refusing; /* th_proxy_silence ... */
    int stalled[CONN_MAX];                     /* accepted, never answered */
    int nstalled;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Take the first rule of kind matching data (len bytes); 1 with *out. */
static int take_rule(th_proxy *p, int kind, const char *data, size_t len, rule *out)
{
    int hit = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nrules; i++)
        if (p->rules[i].kind == kind &&
            memmem(data, len, p->rules[i].pat, strlen(p->rules[i].pat))) {
            *out = p->rules[i];
            memmove(&p->rules[i], &p->rules[i + 1], (size_t)(p->nrules - i - 1) * sizeof *p->rules);
            p->nrules--;
            hit = 1;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return hit;
}

static void rst_close(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

static int send_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Queue c at the end of *q. */
static void push(chunk **q, chunk *c)
{
    while (*q)
        q = &(*q)->next;
    *q = c;
}

static void drop_all(chunk **q)
{
    while (*q) {
        chunk *c = *q;
        *q = c->next;
        free(c);
    }
}

static void *conn_main(void *arg)
{
    pconn *pc = arg;
    th_proxy *p = pc->p;
    chunk *up = NULL, *down = NULL; /* to the server, to the client */
    int client_open = 1, reply_rule = 0, reply_delay = 0;
    char buf[65536];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, kill = pc->kill;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        if (kill) {
            client_open = 1; /* reset the client's side too */
            break;
        }
        int64_t now = mono_ms(), next = now + 50;
        /* deliver what is due, in order per direction */
        int reset = 0, dead = 0;
        while (up && up->at <= now) {
            chunk *c = up;
            up = c->next;
            if (send_all(pc->sfd, c->data, c->len) != 0)
                dead = 1;
            if (c->fires) {
                pthread_mutex_lock(&p->mu);
                p->fired++;
                pthread_mutex_unlock(&p->mu);
            }
            free(c);
        }
        while (down && down->at <= now) {
            chunk *c = down;
            down = c->next;
            if (client_open && send_all(pc->cfd, c->data, c->len) != 0)
                dead = 1;
            reset |= c->reset;
            if (c->reset || c->fires) {
                pthread_mutex_lock(&p->mu);
                p->fired++;
                pthread_mutex_unlock(&p->mu);
            }
            free(c);
        }
        if (reset || dead)
            break;
        if (!client_open && !up) /* the client left and its held requests are in */
            break;
        if (up && up->at < next)
            next = up->at;
        if (down && down->at < next)
            next = down->at;
        struct pollfd pf[2] = {{client_open ? pc->cfd : -1, POLLIN, 0}, {pc->sfd, POLLIN, 0}};
        int n = poll(pf, 2, (int)(next > now ? next - now : 0));
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (pf[0].revents) {
            ssize_t r = recv(pc->cfd, buf, sizeof buf, 0);
            pthread_mutex_lock(&p->mu);
            if (r > 0 && memmem(buf, (size_t)r, "SUBSCRIBE", 9))
                pc->subscriber = 1;
            int drop = p->drop_up || pc->drop_up;
            pthread_mutex_unlock(&p->mu);
            if (r <= 0) {
                client_open = 0; /* held requests still go out */
                for (chunk *o = down; o; o = o->next)
                    if (o->fires) { /* a late reply with nobody to take it: done */
                        pthread_mutex_lock(&p->mu);
                        p->fired++;
                        pthread_mutex_unlock(&p->mu);
                    }
                drop_all(&down);
            } else if (drop) {
                /* requests lost: the server never sees them */
            } else {
                chunk *c = malloc(sizeof *c + (size_t)r);
                if (!c)
                    break;
                memset(c, 0, sizeof *c);
                memcpy(c->data, buf, (size_t)r);
                c->len = (size_t)r;
                c->at = mono_ms();
                rule ru;
                if (take_rule(p, 2, buf, (size_t)r, &ru)) {
                    c->at += ru.delay_ms;
                    c->fires = 1;
                }
                if (take_rule(p, 1, buf, (size_t)r, &ru) || take_rule(p, 3, buf, (size_t)r, &ru)) {
                    reply_rule = ru.kind;
                    reply_delay = ru.delay_ms;
                }
                /* order is kept: nothing overtakes a held chunk */
                for (chunk *o = up; o; o = o->next)
                    if (o->at > c->at)
                        c->at = o->at;
                push(&up, c);
            }
        }
        if (pf[1].revents) {
            ssize_t r = recv(pc->sfd, buf, sizeof buf, 0);
            if (r <= 0)
                break;
            pthread_mutex_lock(&p->mu);
            int drop = p->drop_down || pc->drop_down;
            pthread_mutex_unlock(&p->mu);
            if (drop) /* replies lost: the client never sees them */
                continue;
            chunk *c = malloc(sizeof *c + (size_t)r);
            if (!c)
                break;
            memset(c, 0, sizeof *c);
            memcpy(c->data, buf, (size_t)r);
            c->len = (size_t)r;
            c->at = mono_ms();
            if (reply_rule) {
                c->at += reply_delay;
                c->reset = reply_rule == 1;
                c->fires = reply_rule == 3;
                reply_rule = 0;
            }
            for (chunk *o = down; o; o = o->next)
                if (o->at > c->at)
                    c->at = o->at;
            push(&down, c);
        }
    }
    drop_all(&up);
    drop_all(&down);
    if (client_open)
        rst_close(pc->cfd);
    else
        close(pc->cfd);
    rst_close(pc->sfd);
    pc->cfd = pc->sfd = -1;
    pthread_mutex_lock(&p->mu);
    pc->done = 1;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void *accept_main(void *arg)
{
    th_proxy *p = arg;
    for (;;) {
        struct pollfd pf = {p->lfd, POLLIN, 0};
        int n = poll(&pf, 1, 50);
        pthread_mutex_lock(&p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            return NULL;
        if (n <= 0)
            continue;
        int cfd = accept(p->lfd, NULL, NULL);
        if (cfd < 0)
            continue;
        pthread_mutex_lock(&p->mu);
        int refusing = p->refusing, stalled = 0;
        if (!refusing && p->stalling && p->nstalled < CONN_MAX) {
            p->stalled[p->nstalled++] = cfd;
            stalled = 1;
        }
        pthread_mutex_unlock(&p->mu);
        if (refusing)
            rst_close(cfd);
        if (refusing || stalled)
            continue;
        int sfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)p->target);
        pconn *pc = calloc(1, sizeof *pc);
        if (sfd < 0 || !pc || connect(sfd, (struct sockaddr *)&a, sizeof a) != 0) {
            free(pc);
            if (sfd >= 0)
                close(sfd);
            rst_close(cfd);
            continue;
        }
        pc->p = p;
        pc->cfd = cfd;
        pc->sfd = sfd;
        pthread_mutex_lock(&p->mu);
        int ok = p->nconns < CONN_MAX && pthread_create(&pc->th, NULL, conn_main, pc) == 0;
        if (ok)
            p->conns[p->nconns++] = pc;
        pthread_mutex_unlock(&p->mu);
        if (!ok) {
            rst_close(cfd);
            close(sfd);
            free(pc);
        }
    }
}

th_proxy *th_proxy_start(int port)
{
    th_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->target = port;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->lfd, 64) != 0 || getsockname(p->lfd, (struct sockaddr *)&a, &len) != 0 ||
        pthread_create(&p->acceptor, NULL, accept_main, p) != 0) {
        if (p->lfd >= 0)
            close(p->lfd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
    return p;
}

int th_proxy_port(const th_proxy *p) { return p->port; }
const char *th_proxy_url(const th_proxy *p) { return p->url; }

static void add_rule(th_proxy *p, int kind, const char *pat, int delay_ms)
{
    pthread_mutex_lock(&p->mu);
    if (p->nrules < RULE_MAX) {
        rule *r = &p->rules[p->nrules++];
        r->kind = kind;
        snprintf(r->pat, sizeof r->pat, "%s", pat);
        r->delay_ms = delay_ms;
    }
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_late_reply_then_reset(th_proxy *p, const char *pat, int delay_ms)
{
    add_rule(p, 1, pat, delay_ms);
}

void th_proxy_late_reply(th_proxy *p, const char *pat, int delay_ms)
{
    add_rule(p, 3, pat, delay_ms);
}

void th_proxy_hold_request(th_proxy *p, const char *pat, int delay_ms)
{
    add_rule(p, 2, pat, delay_ms);
}

void th_proxy_silence(th_proxy *p, int up, int down)
{
    pthread_mutex_lock(&p->mu);
    p->drop_up = up;
    p->drop_down = down;
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_stall_new(th_proxy *p, int on)
{
    pthread_mutex_lock(&p->mu);
    p->stalling = on;
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_refuse(th_proxy *p, int on)
{
    pthread_mutex_lock(&p->mu);
    p->refusing = on;
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_reset(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nconns; i++)
        p->conns[i]->kill = 1;
    pthread_mutex_unlock(&p->mu);
}

int th_proxy_silence_subscribers(th_proxy *p, int up, int down)
{
    int n = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nconns; i++) {
        pconn *pc = p->conns[i];
        if (pc->subscriber && !pc->done) {
            pc->drop_up = up;
            pc->drop_down = down;
            n++;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_proxy_reset_subscribers(th_proxy *p)
{
    int n = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nconns; i++) {
        pconn *pc = p->conns[i];
        if (pc->subscriber && !pc->done) {
            pc->kill = 1;
            n++;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_proxy_fired(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->fired;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_proxy_stalled(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->nstalled;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void th_proxy_stop(th_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->acceptor, NULL);
    for (int i = 0; i < p->nconns; i++) {
        pthread_join(p->conns[i]->th, NULL);
        free(p->conns[i]);
    }
    for (int i = 0; i < p->nstalled; i++)
        rst_close(p->stalled[i]);
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
