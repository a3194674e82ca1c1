/*
 * SWIG interface for hilock's Python binding (module hilock.capi, extension hilock._capi).
 *
 * Thin on purpose: it %includes the real public header and adds only
 *   - typemaps: out-parameters become return values, handles become owned
 *     SWIG pointers, a Python sequence of lock handles becomes a C array;
 *   - one %exception that turns a negative HILOCK_E* code into an exception
 *     of the hierarchy defined in hilock/_errors.py, with the handle's detail
 *     message;
 *   - GIL handling: the module is built with -threads, so every call releases
 *     the GIL; %nothread keeps it for the few calls that only read memory;
 *   - a small lost-lock event queue (see "lost events" below).
 * All lock logic stays in libcore; the Pythonic API lives in hilock/*.py.
 */
%module(package="hilock") capi

%include "stdint.i"

%{
#define SWIG_FILE_WITH_INIT
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hilock.h"

/* ---- raising ----------------------------------------------------------- */

/* Raise the hilock exception for code with the given detail text. The
 * classes live in hilock/_errors.py; from_code() builds the instance. */
#define HL_CDETAIL(c) ((c) ? hilock_client_errmsg(c) : "")
#define HL_LDETAIL(l) ((l) ? hilock_lock_errmsg(l) : "")
#define HL_MDETAIL(m) ((m) ? hilock_multilock_errmsg(m) : "")
#define HL_SDETAIL(s) ((s) ? hilock_semaphore_errmsg(s) : "")
#define HL_PDETAIL(s) ((s) ? hilock_permit_semaphore_errmsg(s) : "")
#define HL_ADETAIL(l) ((l) ? hilock_latch_errmsg(l) : "")

static void hl_py_raise(int code, const char *detail)
{
    static PyObject *from_code = NULL;
    if (from_code == NULL) {
        PyObject *mod = PyImport_ImportModule("hilock._errors");
        if (mod == NULL)
            return; /* ImportError is set */
        from_code = PyObject_GetAttrString(mod, "from_code");
        Py_DECREF(mod);
        if (from_code == NULL)
            return;
    }
    PyObject *exc = PyObject_CallFunction(from_code, "is", code, detail ? detail : "");
    if (exc == NULL)
        return;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

/* ---- lost events ------------------------------------------------------- *
 * The C library calls a lost-lock callback on the client's watchdog thread.
 * Running Python there would mean taking the GIL from a thread Python does
 * not know, which can deadlock against hilock_client_close() (it joins the
 * watchdog) and crash during interpreter shutdown. Instead the callback only
 * appends (token, thread id) to this queue; a Python daemon thread blocks in
 * hl_lost_next() (GIL released) and runs the user's callbacks. The token is
 * an integer chosen by the Python layer, never a pointer to a Python object,
 * so a late event for a freed lock is harmless. */
#define HL_LOST_QCAP 4096
typedef struct { uint64_t token; uint64_t tid; } hl_lost_event;
static pthread_mutex_t hl_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hl_lost_cv = PTHREAD_COND_INITIALIZER;
static hl_lost_event hl_lost_q[HL_LOST_QCAP];
static size_t hl_lost_head, hl_lost_len;
static uint64_t hl_lost_dropped;
static pthread_once_t hl_lost_once = PTHREAD_ONCE_INIT;

static void hl_lost_atfork_child(void)
{
    /* Only the forking thread survives; the queue may have been locked. */
    pthread_mutex_init(&hl_lost_mu, NULL);
    pthread_cond_init(&hl_lost_cv, NULL);
    hl_lost_head = hl_lost_len = 0;
}

static void hl_lost_init(void)
{
    pthread_atfork(NULL, NULL, hl_lost_atfork_child);
}

static void hl_lost_push(uint64_t token, uint64_t tid)
{
    pthread_mutex_lock(&hl_lost_mu);
    if (hl_lost_len < HL_LOST_QCAP) {
        hl_lost_q[(hl_lost_head + hl_lost_len) % HL_LOST_QCAP] =
            (hl_lost_event){token, tid};
        hl_lost_len++;
        pthread_cond_signal(&hl_lost_cv);
    } else {
        hl_lost_dropped++; /* `lost` still reads true from the C handle */
    }
    pthread_mutex_unlock(&hl_lost_mu);
}

static void hl_lock_lost_cb(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    hl_lost_push((uint64_t)(uintptr_t)payload, tid);
}

static void hl_multilock_lost_cb(hilock_multilock *m, uint64_t tid, void *payload)
{
    (void)m;
    hl_lost_push((uint64_t)(uintptr_t)payload, tid);
}

#define HL_TRACE_QCAP 256
typedef struct {
    int event, kind;
    uint64_t tid;
    int64_t ms;
    char name[128];
    char message[320];
} hl_trace_event;
static pthread_mutex_t hl_trace_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hl_trace_cv = PTHREAD_COND_INITIALIZER;
static hl_trace_event hl_trace_q[HL_TRACE_QCAP];
static size_t hl_trace_head, hl_trace_len;
static pthread_once_t hl_trace_once = PTHREAD_ONCE_INIT;

static void hl_trace_atfork_child(void)
{
    pthread_mutex_init(&hl_trace_mu, NULL);
    pthread_cond_init(&hl_trace_cv, NULL);
    hl_trace_head = hl_trace_len = 0;
}

static void hl_trace_init(void)
{
    pthread_atfork(NULL, NULL, hl_trace_atfork_child);
}

/* the trace callback: copy, queue (a full queue drops the event: the
 * counters still have it), return */
static void hl_trace_cb_push(const hilock_trace_info *info, void *userdata)
{
    (void)userdata;
    pthread_mutex_lock(&hl_trace_mu);
    if (hl_trace_len < HL_TRACE_QCAP) {
        hl_trace_event *e = &hl_trace_q[(hl_trace_head + hl_trace_len) % HL_TRACE_QCAP];
        e->event = (int)info->event;
        e->kind = (int)info->kind;
        e->tid = info->thread_id;
        e->ms = info->ms;
        snprintf(e->name, sizeof e->name, "%s", info->name ? info->name : "");
        snprintf(e->message, sizeof e->message, "%s", info->message ? info->message : "");
        hl_trace_len++;
        pthread_cond_signal(&hl_trace_cv);
    }
    pthread_mutex_unlock(&hl_trace_mu);
}

/* hl_client_name_stats_list's callback: appends (kind, name or None,
 * figures) to the list; 1 when a Python error is set. */
static int hl_name_stats_add(hilock_kind kind, const char *name, const hilock_name_stats *st,
                             void *userdata)
{
    PyObject *list = userdata;
    const uint64_t *first = &st->figures.granted;
    size_t n = sizeof st->figures / sizeof(uint64_t);
    PyObject *fig = PyTuple_New((Py_ssize_t)n);
    if (!fig)
        return 1; /* a Python error is set */
    for (size_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(first[i]);
        if (!v) {
            Py_DECREF(fig);
            return 1; /* a Python error is set */
        }
        PyTuple_SetItem(fig, (Py_ssize_t)i, v);
    }
    PyObject *item = name ? Py_BuildValue("(isN)", (int)kind, name, fig)
                          : Py_BuildValue("(iON)", (int)kind, Py_None, fig);
    if (!item)
        return 1; /* a Python error is set */
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc ? 1 : 0;
}

%}


/* ---- handles ------------------------------------------------------------ *
 * Opaque handles become owned SWIG pointers whose destructor calls the C
 * close/free, so a dropped Python object never leaks; the Python layer calls
 * close/free explicitly first (%delobject then disowns the pointer). */
%nodefaultctor hilock_client;
%nodefaultctor hilock_lock;
%nodefaultctor hilock_multilock;
%nodefaultctor hilock_rwlock;
%nodefaultdtor hilock_rwlock;
%nodefaultctor hilock_semaphore;
%nodefaultdtor hilock_semaphore;
%nodefaultctor hilock_permit_semaphore;
%nodefaultdtor hilock_permit_semaphore;
%nodefaultctor hilock_latch;
%nodefaultdtor hilock_latch;
struct hilock_semaphore {};
struct hilock_permit_semaphore {};
struct hilock_latch {};
%extend hilock_semaphore { ~hilock_semaphore() { hilock_semaphore_free($self); } }
%extend hilock_permit_semaphore { ~hilock_permit_semaphore() { hilock_permit_semaphore_free($self); } }
%extend hilock_latch { ~hilock_latch() { hilock_latch_free($self); } }
%delobject hilock_semaphore_free;
%delobject hilock_permit_semaphore_free;
%delobject hilock_latch_free;
%nodefaultdtor hilock_client;
%nodefaultdtor hilock_lock;
%nodefaultdtor hilock_multilock;
struct hilock_client {};
struct hilock_lock {};
struct hilock_multilock {};
struct hilock_rwlock {};
%extend hilock_rwlock { ~hilock_rwlock() { hilock_rwlock_free($self); } }
%delobject hilock_rwlock_free;
%extend hilock_client { ~hilock_client() { hilock_client_close($self); } }
%extend hilock_lock { ~hilock_lock() { hilock_lock_free($self); } }
%extend hilock_multilock { ~hilock_multilock() { hilock_multilock_free($self); } }
%delobject hilock_client_close;
%delobject hilock_lock_free;
%delobject hilock_multilock_free;

%define HL_OUT_HANDLE(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *tmp = NULL) "$1 = &tmp;";
%typemap(argout) TYPE **out {
    $result = SWIG_AppendOutput($result,
        SWIG_NewPointerObj(SWIG_as_voidptr(tmp$argnum), $*1_descriptor, SWIG_POINTER_OWN));
}
%enddef
HL_OUT_HANDLE(hilock_client)
HL_OUT_HANDLE(hilock_lock)
HL_OUT_HANDLE(hilock_multilock)
HL_OUT_HANDLE(hilock_rwlock)
HL_OUT_HANDLE(hilock_semaphore)
HL_OUT_HANDLE(hilock_permit_semaphore)
HL_OUT_HANDLE(hilock_latch)

/* ---- out-parameters ------------------------------------------------------ */
%apply int *OUTPUT { int *out, int *deleted, int *cancelled, int *set };
%apply long long *OUTPUT { int64_t *out, int64_t *token, int64_t *drained, int64_t *left };

/* A permit id written by the C call (hilock_permit_semaphore_acquire):
 * returned as str ("" when none was taken). */
%typemap(in, numinputs=0) char *id (char idbuf[HILOCK_PERMIT_ID_SIZE]) {
    idbuf[0] = '\0';
    $1 = idbuf;
}
%typemap(argout) char *id {
    $result = SWIG_AppendOutput($result, SWIG_FromCharPtr($1));
}
%apply unsigned long long *OUTPUT { uint64_t *token, uint64_t *tid };

/* hilock_client_open's error buffer: filled by C, read by the %exception. */
%typemap(in, numinputs=0) (char *errbuf, size_t errlen) (char buf[512]) {
    buf[0] = '\0';
    $1 = buf;
    $2 = sizeof buf;
}

/* hilock_client_owner's buffer: returned as str. */
%typemap(in, numinputs=0) (char *buf, size_t len) (char obuf[128]) {
    obuf[0] = '\0';
    $1 = obuf;
    $2 = sizeof obuf;
}
%typemap(argout) (char *buf, size_t len) {
    $result = SWIG_AppendOutput($result, SWIG_FromCharPtr($1));
}

/* A Python sequence of lock handles -> (hilock_lock *const *, size_t).
 * Only stable-ABI calls (the module is built with Py_LIMITED_API): any
 * iterable becomes a list, whose items are borrowed. */
%typemap(in) (hilock_lock *const *locks, size_t n) {
    PyObject *seq = PySequence_List($input);
    if (seq == NULL) {
        PyErr_SetString(PyExc_TypeError, "expected a sequence of lock handles");
        SWIG_fail;
    }
    Py_ssize_t n = PyList_Size(seq);
    $1 = (hilock_lock **)calloc(n > 0 ? (size_t)n : 1, sizeof(hilock_lock *));
    if ($1 == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        SWIG_fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        void *p = NULL;
        if (!SWIG_IsOK(SWIG_ConvertPtr(PyList_GetItem(seq, i), &p,
                                       $descriptor(hilock_lock *), 0))) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "expected a sequence of lock handles");
            SWIG_fail;
        }
        $1[i] = (hilock_lock *)p;
    }
    $2 = (size_t)n;
    Py_DECREF(seq);
}
%typemap(freearg) (hilock_lock *const *locks, size_t n) { free((void *)$1); }

/* ---- status codes ---------------------------------------------------------
 * The one %exception: every function listed below returns 0 or a negative
 * HILOCK_E* code. A negative code raises; success returns None (or the
 * out-parameters). Acquire functions return a bool instead: False for
 * HILOCK_ETIMEDOUT, which is an expected outcome, not an error. */
%define HL_CHECKED(FUNC, DETAIL)
%exception FUNC {
    $action
    if (result < 0) {
        hl_py_raise(result, DETAIL);
        SWIG_fail;
    }
}
/* No result object yet: the out-parameters' argout typemaps then start from
 * nothing (SWIG >= 4.3 would otherwise append them to None as a list, since
 * the C function does not return void); None when there is no out-parameter. */
%typemap(out) int FUNC "$result = NULL;";
%typemap(ret) int FUNC "if ($result == NULL && !PyErr_Occurred()) $result = SWIG_Py_Void();";
%enddef

%define HL_ACQUIRE(FUNC, DETAIL)
%exception FUNC {
    $action
    if (result < 0 && result != HILOCK_ETIMEDOUT) {
        hl_py_raise(result, DETAIL);
        SWIG_fail;
    }
}
%typemap(out) int FUNC "$result = PyBool_FromLong($1 == 0);";
%enddef

HL_CHECKED(hilock_client_open, arg4)
HL_CHECKED(hilock_client_owner, HL_CDETAIL(arg1))
HL_CHECKED(hilock_options_init, "")
HL_CHECKED(hilock_lock_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_fair_lock_new, HL_CDETAIL(arg2))
HL_ACQUIRE(hilock_lock_acquire, HL_LDETAIL(arg1))
HL_ACQUIRE(hilock_lock_acquire_tid, HL_LDETAIL(arg1))
HL_CHECKED(hilock_lock_cancel, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_extend, HL_LDETAIL(arg1))
HL_CHECKED(hilock_lock_extend_tid, HL_LDETAIL(arg1))
HL_CHECKED(hilock_multilock_cancel, HL_MDETAIL(arg2))
HL_CHECKED(hilock_lock_release, HL_LDETAIL(arg1))
HL_CHECKED(hilock_lock_release_tid, HL_LDETAIL(arg1))
HL_CHECKED(hilock_lock_force_unlock, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_is_locked, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_is_held, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_is_held_tid, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_hold_count, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_hold_count_tid, HL_LDETAIL(arg2))
HL_CHECKED(hilock_lock_remaining_ms, HL_LDETAIL(arg2))
HL_CHECKED(hilock_fenced_lock_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_rwlock_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_lock_token, HL_LDETAIL(arg2))
/* acquire with a token: returns the token (>= 1), or 0 when the wait
 * elapsed (and on a lock that is not fenced) */
%define HL_ACQUIRE_TOKEN(FUNC)
%exception FUNC {
    $action
    if (result < 0 && result != HILOCK_ETIMEDOUT) {
        hl_py_raise(result, HL_LDETAIL(arg2));
        SWIG_fail;
    }
}
%typemap(out) int FUNC "$result = NULL;";
%enddef
HL_ACQUIRE_TOKEN(hilock_lock_acquire_token)
HL_ACQUIRE_TOKEN(hilock_lock_acquire_token_tid)
HL_CHECKED(hilock_multilock_new, "")
HL_CHECKED(hilock_redlock_new, "")
HL_CHECKED(hilock_multilock_set_member_timeout, HL_MDETAIL(arg1))
HL_ACQUIRE(hilock_multilock_acquire, HL_MDETAIL(arg1))
HL_ACQUIRE(hilock_multilock_acquire_tid, HL_MDETAIL(arg1))
HL_CHECKED(hilock_multilock_release, HL_MDETAIL(arg1))
HL_CHECKED(hilock_multilock_release_tid, HL_MDETAIL(arg1))
HL_CHECKED(hilock_multilock_is_held, HL_MDETAIL(arg2))
HL_CHECKED(hilock_multilock_is_held_tid, HL_MDETAIL(arg2))
HL_CHECKED(hilock_multilock_validity_ms, HL_MDETAIL(arg2))
HL_CHECKED(hilock_multilock_validity_ms_tid, HL_MDETAIL(arg2))
HL_CHECKED(hilock_semaphore_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_semaphore_try_set_permits, HL_SDETAIL(arg2))
HL_ACQUIRE(hilock_semaphore_acquire, HL_SDETAIL(arg1))
HL_ACQUIRE(hilock_semaphore_acquire_tid, HL_SDETAIL(arg1))
HL_CHECKED(hilock_semaphore_release, HL_SDETAIL(arg1))
HL_CHECKED(hilock_semaphore_available, HL_SDETAIL(arg2))
HL_CHECKED(hilock_semaphore_drain, HL_SDETAIL(arg2))
HL_CHECKED(hilock_semaphore_add_permits, HL_SDETAIL(arg1))
HL_CHECKED(hilock_semaphore_set_permits, HL_SDETAIL(arg1))
HL_CHECKED(hilock_semaphore_delete, HL_SDETAIL(arg2))
HL_CHECKED(hilock_semaphore_cancel, HL_SDETAIL(arg2))
HL_CHECKED(hilock_permit_semaphore_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_permit_semaphore_try_set_permits, HL_PDETAIL(arg2))
/* acquire: the permit id, or "" when the wait elapsed */
%define HL_ACQUIRE_ID(FUNC)
%exception FUNC {
    $action
    if (result < 0 && result != HILOCK_ETIMEDOUT) {
        hl_py_raise(result, HL_PDETAIL(arg2));
        SWIG_fail;
    }
}
%typemap(out) int FUNC "$result = NULL;";
%enddef
HL_ACQUIRE_ID(hilock_permit_semaphore_acquire)
HL_ACQUIRE_ID(hilock_permit_semaphore_acquire_tid)
HL_CHECKED(hilock_permit_semaphore_release, HL_PDETAIL(arg1))
HL_CHECKED(hilock_permit_semaphore_update_lease, HL_PDETAIL(arg1))
HL_CHECKED(hilock_permit_semaphore_available, HL_PDETAIL(arg2))
HL_CHECKED(hilock_permit_semaphore_add_permits, HL_PDETAIL(arg1))
HL_CHECKED(hilock_permit_semaphore_delete, HL_PDETAIL(arg2))
HL_CHECKED(hilock_permit_semaphore_cancel, HL_PDETAIL(arg2))
HL_CHECKED(hilock_latch_new, HL_CDETAIL(arg2))
HL_CHECKED(hilock_latch_try_set_count, HL_ADETAIL(arg2))
HL_CHECKED(hilock_latch_count_down, HL_ADETAIL(arg2))
HL_CHECKED(hilock_latch_count, HL_ADETAIL(arg2))
HL_ACQUIRE(hilock_latch_await, HL_ADETAIL(arg1))
HL_ACQUIRE(hilock_latch_await_tid, HL_ADETAIL(arg1))
HL_CHECKED(hilock_latch_delete, HL_ADETAIL(arg2))
HL_CHECKED(hilock_latch_cancel, HL_ADETAIL(arg2))

/* These build Python objects or only take a short mutex: the GIL stays
 * held (declared before their %inline definitions, so SWIG sees it). */
%nothread hl_client_stats_tuple;
%nothread hl_client_name_stats_list;
%nothread hl_client_name_tracked;
%nothread hl_trace_take;
%nothread hl_client_watch_trace;

%inline %{
/* Route lost events of l (or m) to the queue under token (0 = stop). */
void hl_lock_watch_lost(hilock_lock *l, uint64_t token)
{
    pthread_once(&hl_lost_once, hl_lost_init);
    if (token)
        hilock_lock_set_lost_callback(l, hl_lock_lost_cb, (void *)(uintptr_t)token);
    else
        hilock_lock_set_lost_callback(l, NULL, NULL);
}

void hl_multilock_watch_lost(hilock_multilock *m, uint64_t token)
{
    pthread_once(&hl_lost_once, hl_lost_init);
    if (token)
        hilock_multilock_set_lost_callback(m, hl_multilock_lost_cb,
                                           (void *)(uintptr_t)token);
    else
        hilock_multilock_set_lost_callback(m, NULL, NULL);
}

/* Wait up to timeout_ms (< 0: forever) for a lost event. Returns 1 and fills
 * the token and thread id, or 0 on timeout. */
int hl_lost_next(uint64_t *token, uint64_t *tid, int64_t timeout_ms)
{
    int got = 0;
    struct timespec ts;
    *token = 0;
    *tid = 0;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(timeout_ms / 1000);
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&hl_lost_mu);
    while (hl_lost_len == 0) {
        int rc = timeout_ms >= 0 ? pthread_cond_timedwait(&hl_lost_cv, &hl_lost_mu, &ts)
                                 : pthread_cond_wait(&hl_lost_cv, &hl_lost_mu);
        if (rc == ETIMEDOUT)
            break;
    }
    if (hl_lost_len > 0) {
        *token = hl_lost_q[hl_lost_head].token;
        *tid = hl_lost_q[hl_lost_head].tid;
        hl_lost_head = (hl_lost_head + 1) % HL_LOST_QCAP;
        hl_lost_len--;
        got = 1;
    }
    pthread_mutex_unlock(&hl_lost_mu);
    return got;
}

/* Wake one hl_lost_next() waiter with token 0 (used to stop the thread). */
void hl_lost_wake(void)
{
    hl_lost_push(0, 0);
}

/* ---- statistics and trace events --------------------------------------- *
 * hilock_client_stats as a flat tuple of ints: the version, then every
 * uint64_t of hilock_stats after it in declaration order (the Python layer
 * names them). Trace events go through a queue as lost events do: the C
 * callback (any hilock thread) copies the event; the Python thread
 * "hilock-trace" blocks in hl_trace_next (GIL released), then takes the
 * event with hl_trace_take and logs it. */
PyObject *hl_client_stats_tuple(hilock_client *c)
{
    hilock_stats s;
    memset(&s, 0, sizeof s);
    int rc = hilock_client_stats(c, &s);
    if (rc) {
        hl_py_raise(rc, "cannot read the client's statistics");
        return NULL;
    }
    const uint64_t *first = &s.kind[0].granted;
    size_t n = (sizeof s - offsetof(hilock_stats, kind)) / sizeof(uint64_t);
    PyObject *t = PyTuple_New((Py_ssize_t)n + 1);
    if (!t)
        return NULL;
    PyTuple_SetItem(t, 0, PyLong_FromUnsignedLong(s.version));
    for (size_t i = 0; i < n; i++)
        PyTuple_SetItem(t, (Py_ssize_t)i + 1, PyLong_FromUnsignedLongLong(first[i]));
    return t;
}

/* hilock_client_each_name_stats as a list of (kind, name or None, figures)
 * tuples, figures the uint64_t of hilock_kind_stats in declaration order;
 * None when the client keeps no per-name counters. */
PyObject *hl_client_name_stats_list(hilock_client *c)
{
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    hilock_name_stats buf;
    memset(&buf, 0, sizeof buf);
    int rc = hilock_client_each_name_stats(c, &buf, hl_name_stats_add, list);
    if (rc == 1) { /* the callback's Python error */
        Py_DECREF(list);
        return NULL;
    }
    if (rc) {
        Py_DECREF(list);
        hl_py_raise(rc, "cannot read the client's per-name statistics");
        return NULL;
    }
    return list;
}

/* 1 when (kind, name) is one of c's tracked per-name pairs, else 0
 * (counted in its kind's other entry, never counted, or per-name counters
 * off). */
int hl_client_name_tracked(hilock_client *c, int kind, const char *name)
{
    hilock_name_stats ns;
    memset(&ns, 0, sizeof ns);
    return name && hilock_client_name_stats(c, (hilock_kind)kind, name, &ns) == 1;
}

void hl_client_watch_trace(hilock_client *c, int on)
{
    pthread_once(&hl_trace_once, hl_trace_init);
    hilock_client_set_trace(c, on ? hl_trace_cb_push : NULL, NULL);
}

/* Wait up to timeout_ms (< 0: forever) for a trace event: 1 when one is
 * queued (take it with hl_trace_take), 0 on timeout. */
int hl_trace_next(int64_t timeout_ms)
{
    struct timespec ts;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(timeout_ms / 1000);
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&hl_trace_mu);
    while (hl_trace_len == 0) {
        int rc = timeout_ms >= 0 ? pthread_cond_timedwait(&hl_trace_cv, &hl_trace_mu, &ts)
                                 : pthread_cond_wait(&hl_trace_cv, &hl_trace_mu);
        if (rc == ETIMEDOUT)
            break;
    }
    int got = hl_trace_len > 0;
    pthread_mutex_unlock(&hl_trace_mu);
    return got;
}

/* The oldest queued event as (event, kind, name, thread id, ms, message),
 * or None. */
PyObject *hl_trace_take(void)
{
    hl_trace_event e;
    int got = 0;
    pthread_mutex_lock(&hl_trace_mu);
    if (hl_trace_len > 0) {
        e = hl_trace_q[hl_trace_head];
        hl_trace_head = (hl_trace_head + 1) % HL_TRACE_QCAP;
        hl_trace_len--;
        got = 1;
    }
    pthread_mutex_unlock(&hl_trace_mu);
    if (!got)
        Py_RETURN_NONE;
    return Py_BuildValue("(iisKLs)", e.event, e.kind, e.name, (unsigned long long)e.tid,
                         (long long)e.ms, e.message);
}
%}

/* ---- GIL ------------------------------------------------------------------
 * Built with -threads: every wrapper releases the GIL around the C call.
 * These only read memory (or take a short internal mutex) and keep it. */
%nothread hilock_version;
%nothread hilock_version_string;
%nothread hilock_strerror;
%nothread hilock_client_id;
%nothread hilock_client_errmsg;
%nothread hilock_thread_id;
%nothread hilock_client_owner;
%nothread hilock_options_init;
%nothread hilock_lock_name;
%nothread hilock_lock_kind;
%nothread hilock_lock_client;
%nothread hilock_lock_is_lost;
%nothread hilock_lock_is_lost_tid;
%nothread hilock_lock_errmsg;
%nothread hilock_multilock_is_lost;
%nothread hilock_multilock_errmsg;
%nothread hl_lost_wake;
%nothread hilock_rwlock_read_lock;
%nothread hilock_rwlock_write_lock;
%nothread hilock_semaphore_name;
%nothread hilock_semaphore_errmsg;
%nothread hilock_permit_semaphore_name;
%nothread hilock_permit_semaphore_errmsg;
%nothread hilock_latch_name;
%nothread hilock_latch_errmsg;

/* Not needed from Python (the Python layer installs its own callbacks). */
%ignore hilock_lock_set_lost_callback;
%ignore hilock_multilock_set_lost_callback;
%ignore hilock_permit_semaphore_keep; /* C callbacks: the CLI's; Python has none yet */
%ignore hilock_permit_semaphore_forget;
%ignore hilock_lock_client;
/* Statistics: hl_client_stats_tuple; trace events: hl_client_watch_trace. */
%ignore hilock_client_stats;
%ignore hilock_client_set_trace;
%ignore hilock_stats;
%ignore hilock_kind_stats;
%ignore hilock_client_name_stats;
%ignore hilock_client_each_name_stats;
%ignore hilock_name_stats;
%ignore hilock_name_stats_cb;
%ignore hilock_trace_info;
/* Lock inspection (hilock_inspect) is not wrapped yet: its result is a
 * library-owned struct of arrays that wants a Python-side view. */
%ignore hilock_inspect;
%ignore hilock_lock_info_free;
%ignore hilock_info_kind_name;
%ignore hilock_lock_info;
%ignore hilock_holder_info;
%ignore hilock_waiter_info;

/* Time macros with casts, which SWIG does not evaluate by itself. */
%constant long long HILOCK_MAX_TIME_MS = HILOCK_MAX_TIME_MS;
%constant long long HILOCK_WAIT_FOREVER = HILOCK_WAIT_FOREVER;
%constant long long HILOCK_LEASE_WATCHDOG = HILOCK_LEASE_WATCHDOG;

%include "hilock.h"
