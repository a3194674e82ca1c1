/* The transport's lifecycle: set up, shut down and free what one client's
 * transport holds (nodes, threads, TLS context, endpoint), its liveness
 * check, and the error sink it reports to. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

void hl_transport_init(hl_transport *c)
{
    hl_forkguard_init(&c->fork);
    hl_stats_init(&c->stats);
    hl_worker_init(&c->sw.wk);
    hl_worker_init(&c->drain.wk);
    pthread_mutex_init(&c->drain.mu, NULL);
    hl_cond_init_mono(&c->drain.settled);
    pthread_mutex_init(&c->nodes_mu, NULL);
    c->max_nodes = HL_MAX_NODES;
    pthread_mutex_init(&c->refresh_mu, NULL);
    pthread_mutex_init(&c->wd.mu, NULL);
    hl_worker_init(&c->wd.wk);
    hl_worker_init(&c->wd.rwk);
    hl_cond_init_mono(&c->wd.cv);
}

void hl_transport_free(hl_transport *c, int forked)
{
    /* In a child after fork() the parent's threads may have been waiting on
     * these condition variables: destroying them would wait for waiters that
     * do not exist here (glibc), so the child only frees memory. */
    for (int i = 0; i < c->nnodes; i++)
        hl_node_free(c->nodes[i], forked);
    hl_tls_free(c->ep.tls_ctx);
    hl_endpoint_free(&c->ep);
    hl_forkguard_free(&c->fork);
    hl_worker_close(&c->wd.rwk); /* the renewal thread's pipe (descriptors: in a child too) */
    if (forked)
        hl_wd_free_forked(c); /* its holds' entries: memory only */
    hl_holds_free(&c->wd.holds); /* memory: in a child too */
    if (forked)
        return;
    pthread_mutex_destroy(&c->nodes_mu);
    pthread_mutex_destroy(&c->refresh_mu);
    pthread_mutex_destroy(&c->wd.mu);
    pthread_cond_destroy(&c->wd.cv);
    pthread_mutex_destroy(&c->drain.mu);
    pthread_cond_destroy(&c->drain.settled);
    hl_stats_destroy(&c->stats);
}

void hl_transport_shutdown(hl_transport *c, int from_watchdog)
{
    hl_sentinel_stop(c);
    hl_pubsub_shutdown(c);
    hl_wd_shutdown(c, from_watchdog);
    hl_drain_shutdown(c);
    for (int i = 0; i < c->nnodes; i++) {
        hl_pool *p = &c->nodes[i]->pool;
        pthread_mutex_lock(&p->mu);
        for (int j = 0; j < p->nidle; j++)
            redisFree(p->idle[j]);
        p->nidle = 0;
        pthread_mutex_unlock(&p->mu);
    }
}

int hl_transport_check(hl_transport *c, char *err)
{
    if (hl_forkguard_forked(&c->fork)) {
        hl_set_err(err, "client used in a child process after fork(); open a new client");
        return HILOCK_ECLOSED;
    }
    if (__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE)) {
        hl_set_err(err, "client is closed");
        return HILOCK_ECLOSED;
    }
    return 0;
}

int hl_transport_forked(const hl_transport *c)
{
    return hl_forkguard_forked(&c->fork);
}

void hl_transport_report(hl_transport *c, const char *msg)
{
    if (c->sinks.error)
        c->sinks.error(c->sinks.ctx, msg);
}

redisContext *hl_transport_connect_first(hl_transport *c, int *code, char *err)
{
    return hl_node_connect(c->nodes[0], c->opts.connect_timeout_ms, code, err);
}

void hl_transport_keep_first(hl_transport *c, redisContext *ctx)
{
    hl_pool_add_idle(c->nodes[0], ctx);
}
