/* API layer: the list of waits in progress on a handle, which its cancel
 * call walks (hilock_lock_cancel, hilock_semaphore_cancel, ...). */
#include <string.h>
#include <time.h>

#include "api.h"

void hl_pending_add(pthread_mutex_t *mu, hl_pending **head, hl_pending *p, uint64_t tid)
{
    memset(p, 0, sizeof *p);
    p->tid = tid;
    pthread_mutex_lock(mu);
    p->next = *head;
    *head = p;
    pthread_mutex_unlock(mu);
}

void hl_pending_remove(pthread_mutex_t *mu, hl_pending **head, hl_pending *p)
{
    pthread_mutex_lock(mu);
    for (hl_pending **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(mu);
}

void hl_pending_set_waiter(pthread_mutex_t *mu, hl_pending *p, hl_waiter *w)
{
    pthread_mutex_lock(mu);
    p->w = w;
    pthread_mutex_unlock(mu);
}

int hl_pending_is_cancelled(const hl_pending *p)
{
    return p && __atomic_load_n(&p->cancelled, __ATOMIC_ACQUIRE);
}

int hl_pending_cancel(pthread_mutex_t *mu, hl_pending **head, uint64_t tid)
{
    int n = 0;
    pthread_mutex_lock(mu);
    for (hl_pending *p = *head; p; p = p->next) { /* *head read under mu */
        if (p->tid != tid || __atomic_load_n(&p->cancelled, __ATOMIC_ACQUIRE))
            continue;
        __atomic_store_n(&p->cancelled, 1, __ATOMIC_RELEASE);
        n++;
        if (p->w) /* asleep (or about to be) on its subscription */
            hl_sub_poke(p->w);
    }
    pthread_mutex_unlock(mu);
    return n;
}

void hl_wait_sub_init(hl_wait_sub *s, hl_transport *t, pthread_mutex_t *mu, hl_pending *p)
{
    memset(s, 0, sizeof *s);
    s->t = t;
    s->mu = mu;
    s->p = p;
}

int hl_wait_sub_subscribe(hl_wait_sub *s, const char *channel, int wake_rule, int64_t deadline)
{
    int64_t limit = s->t->opts.command_timeout_ms;
    int64_t left = hl_ms_left(deadline);
    if (left >= 0 && left < limit)
        limit = left;
    int rc = hl_sub_register_rule(s->t, &s->w, channel, limit, wake_rule);
    if (s->p && s->w.chan) { /* registered: a cancel may now wake it */
        s->w.cancel = &s->p->cancelled;
        hl_pending_set_waiter(s->mu, s->p, &s->w);
    }
    return rc == 0;
}

int hl_wait_sub_sleep(hl_wait_sub *s, int64_t ms)
{
    if (s->w.chan)
        return hl_sub_wait(s->t, &s->w, ms);
    if (ms > 0) { /* no subscription: the machine polls */
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

void hl_wait_sub_unsubscribe(hl_wait_sub *s)
{
    if (s->p && s->w.chan)
        hl_pending_set_waiter(s->mu, s->p, NULL); /* a cancel no longer pokes it */
    hl_sub_unregister(s->t, &s->w); /* no-op when already unregistered */
}

int64_t hl_ms_left(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - hl_now_mono_ms();
    return left > 0 ? left : 0;
}
