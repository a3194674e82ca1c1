/*
 * hilock._engine: libcore's engine (the protocol layer's machines, command
 * builders and reply decoders) for Python drivers that do their own I/O —
 * hilock.aio, the asyncio driver. A hand-written extension on the stable
 * ABI (Py_LIMITED_API 3.9), built next to the SWIG module by
 * python/CMakeLists.txt and folded into the same wheel.
 *
 * The driver moves bytes; everything else is here:
 *   Reader    bytes in (from any connection), Reply objects out (hiredis's
 *             reader, bounded like the C transport's)
 *   Names     one lock's names; builds its machines and query commands
 *   Acquire   the acquire machine: next() says what to do, on_*() feed back
 *   Release   the release machine (unlock latch, lease re-applied, resend)
 *   Settle    undo an attempt whose reply never came, on its connection
 * plus decoders that turn a Reply into a validated number. Commands leave
 * as RESP bytes; no Python code ever sees a script, key, channel or Redis
 * error string it has to interpret.
 *
 * Errors: a decoder or machine result is a negative HILOCK_E* code; the
 * functions that fail raise the exception hilock._errors.from_code builds.
 * Nothing here blocks or releases the GIL: every call is a few microseconds.
 */
#define _POSIX_C_SOURCE 200809L
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "engine_fns.h" /* the engine's free functions, listed once */

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static PyObject *raise_code(int code, const char *detail)
{
    PyObject *mod = PyImport_ImportModule("hilock._errors");
    if (!mod)
        return NULL;
    PyObject *exc = PyObject_CallMethod(mod, "from_code", "is", code, detail ? detail : "");
    Py_DECREF(mod);
    if (!exc)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static int check_range(long long v, long long lo, long long hi, const char *what)
{
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s out of range: %lld", what, v);
        return -1;
    }
    return 0;
}

/* A string argument (parsed with "s": UTF-8, no NUL) of 1..max bytes. */
static const char *check_str(const char *s, size_t max, const char *what)
{
    size_t len = strlen(s);
    if (len > max || len == 0) {
        PyErr_Format(PyExc_ValueError, "%s must be 1..%zu bytes", what, max);
        return NULL;
    }
    return s;
}

/* A command's RESP bytes (the engine's hl_resp_*) as bytes. */
static PyObject *cmd_bytes(hl_cmd *cmd, int eval)
{
    if (eval)
        hl_cmd_to_eval(cmd);
    size_t n = hl_resp_len(cmd->argc, cmd->argvlen);
    char stack[4096];
    char *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf)
        return PyErr_NoMemory();
    hl_resp_write(buf, cmd->argc, cmd->argv, cmd->argvlen);
    PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
    if (buf != stack)
        free(buf);
    return b;
}

/* ------------------------------------------------------------------ */
/* module state: the types (heap types, one module)                    */
/* ------------------------------------------------------------------ */

static PyTypeObject *ReaderType, *ReplyType, *NamesType, *AcquireType, *ReleaseType,
    *SettleType;

/* tp_new of the types only the engine makes (replies, machines): without
 * it a heap type inherits object's, and Reply() or Call() from Python gives
 * a zeroed object that crashes the first method. Py_TPFLAGS_DISALLOW_
 * INSTANTIATION says the same from 3.10 on; the stable ABI here is 3.9. */
static PyObject *no_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    PyObject *name = PyObject_GetAttrString((PyObject *)type, "__qualname__");
    if (name) {
        PyErr_Format(PyExc_TypeError,
                     "cannot create 'hilock._engine.%U' instances (the engine makes them)", name);
        Py_DECREF(name);
    }
    return NULL;
}

static void generic_dealloc_tail(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------------ */
/* Reply                                                               */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    redisReply *r;
} ReplyObject;

static void reply_dealloc(PyObject *self)
{
    ReplyObject *o = (ReplyObject *)self;
    if (o->r)
        freeReplyObject(o->r);
    generic_dealloc_tail(self);
}

static redisReply *get_reply(PyObject *o)
{
    if (!PyObject_TypeCheck(o, ReplyType)) {
        PyErr_SetString(PyExc_TypeError, "expected a hilock._engine.Reply");
        return NULL;
    }
    return ((ReplyObject *)o)->r;
}

/* r.error -> the server's error text, or None */
static PyObject *reply_error(PyObject *self, void *closure)
{
    (void)closure;
    redisReply *r = ((ReplyObject *)self)->r;
    if (r->type == REDIS_REPLY_ERROR)
        return PyUnicode_DecodeUTF8(r->str, (Py_ssize_t)r->len, "replace");
    Py_RETURN_NONE;
}

static PyGetSetDef reply_getset[] = {
    {"error", reply_error, NULL, "the server's error text, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot reply_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, reply_dealloc},
    {Py_tp_getset, reply_getset},
    {Py_tp_doc, "One reply from the server (opaque: give it to a machine or a decoder)."},
    {0, NULL}};

static PyType_Spec reply_spec = {"hilock._engine.Reply", sizeof(ReplyObject), 0,
                                 Py_TPFLAGS_DEFAULT, reply_slots};

static PyObject *new_reply(redisReply *r)
{
    ReplyObject *o = PyObject_New(ReplyObject, ReplyType);
    if (!o) {
        freeReplyObject(r);
        return NULL;
    }
    o->r = r;
    return (PyObject *)o;
}

/* ------------------------------------------------------------------ */
/* Reader                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    redisReader *rd;
    int broken;
} ReaderObject;

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ":Reader") || (kw && PyDict_Size(kw))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Reader() takes no arguments");
        return NULL;
    }
    ReaderObject *o = PyObject_New(ReaderObject, type);
    if (!o)
        return NULL;
    o->broken = 0;
    o->rd = redisReaderCreate();
    if (!o->rd) {
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    hl_reader_bound(o->rd);
    return (PyObject *)o;
}

static void reader_dealloc(PyObject *self)
{
    ReaderObject *o = (ReaderObject *)self;
    if (o->rd)
        redisReaderFree(o->rd);
    generic_dealloc_tail(self);
}

static PyObject *reader_fail(ReaderObject *o)
{
    o->broken = 1;
    return raise_code(HILOCK_EPROTO, o->rd->errstr[0] ? o->rd->errstr : "broken stream");
}

/* rd.feed(bytes) */
static PyObject *reader_feed(PyObject *self, PyObject *arg)
{
    ReaderObject *o = (ReaderObject *)self;
    char *buf;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &buf, &len) != 0)
        return NULL;
    if (o->broken || redisReaderFeed(o->rd, buf, (size_t)len) != REDIS_OK)
        return reader_fail(o);
    Py_RETURN_NONE;
}

/* rd.feed_from(bytearray, n): the first n bytes of a bytearray (an asyncio
   BufferedProtocol's receive buffer), with no bytes object in between */
static PyObject *reader_feed_from(PyObject *self, PyObject *args)
{
    ReaderObject *o = (ReaderObject *)self;
    PyObject *ba;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n:feed_from", &PyByteArray_Type, &ba, &n))
        return NULL;
    if (n < 0 || n > PyByteArray_Size(ba)) {
        PyErr_SetString(PyExc_ValueError, "feed_from: n out of the buffer's range");
        return NULL;
    }
    if (o->broken || redisReaderFeed(o->rd, PyByteArray_AsString(ba), (size_t)n) != REDIS_OK)
        return reader_fail(o);
    Py_RETURN_NONE;
}

/* rd.get() -> Reply | None (needs more bytes); raises ProtocolError on a bad stream */
static PyObject *reader_get(PyObject *self, PyObject *unused)
{
    (void)unused;
    ReaderObject *o = (ReaderObject *)self;
    void *rep = NULL;
    if (o->broken || redisReaderGetReply(o->rd, &rep) != REDIS_OK)
        return reader_fail(o);
    if (!rep)
        Py_RETURN_NONE;
    return new_reply((redisReply *)rep);
}

/* rd.pending() -> bytes fed and not yet returned as replies */
static PyObject *reader_pending(PyObject *self, PyObject *unused)
{
    (void)unused;
    ReaderObject *o = (ReaderObject *)self;
    return PyLong_FromSize_t(o->rd->len - o->rd->pos);
}

/* in _engine_wire.c (the delivery a Wire does too) */
static PyObject *reader_deliver(PyObject *self, PyObject *args);

static PyMethodDef reader_methods[] = {
    {"feed", reader_feed, METH_O, "feed(bytes): bytes read from the connection"},
    {"feed_from", reader_feed_from, METH_VARARGS,
     "feed_from(bytearray, n): its first n bytes, read from the connection"},
    {"deliver", reader_deliver, METH_VARARGS,
     "deliver(bytearray, n, pending, on_event) -> bool: fed, and every reply handed to its "
     "request (or on_event) as a Wire does; False: a stream that cannot be parsed"},
    {"get", reader_get, METH_NOARGS, "get() -> Reply or None (more bytes needed)"},
    {"pending", reader_pending, METH_NOARGS, "bytes not yet returned as replies"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot reader_slots[] = {
    {Py_tp_new, reader_new},
    {Py_tp_dealloc, reader_dealloc},
    {Py_tp_methods, reader_methods},
    {Py_tp_doc, "Reader(): RESP bytes in, Reply objects out (bounded hiredis reader)."},
    {0, NULL}};

static PyType_Spec reader_spec = {"hilock._engine.Reader", sizeof(ReaderObject), 0,
                                  Py_TPFLAGS_DEFAULT, reader_slots};

static int arg_code(PyObject *arg, int *code);

enum { ACT_SEND = HL_ACT_SEND, ACT_SUBSCRIBE = HL_ACT_SUBSCRIBE, ACT_WAIT = HL_ACT_WAIT,
       ACT_UNSUBSCRIBE = HL_ACT_UNSUBSCRIBE, ACT_DONE = HL_ACT_DONE };

/* ------------------------------------------------------------------ */
/* Names                                                               */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    hl_names n;
    hilock_kind kind;
    int ok;
} NamesObject;

static PyObject *hb_invoke(const hb_fn *f, PyObject *self, PyObject *args);
/* _engine_holds.c: a Holds' table; a key's hold (-1: an exception); a hold's key */
static hl_holds *holds_table(PyObject *self);
static int holds_lookup(PyObject *self, PyObject *key, hl_hold **h);
static PyObject *hold_key(hl_hold *h);
static hl_sublive *sublive_of(PyObject *self);
static hl_unsettled *unsettled_of(PyObject *self);
static const hl_sem_names *semnames_of(PyObject *self, int *kind); /* _engine_sem.c */

static int check_kind(long k)
{
    if (k < HILOCK_KIND_REENTRANT || k > HILOCK_KIND_FENCED) {
        PyErr_Format(PyExc_ValueError, "unknown lock kind %ld", k);
        return -1;
    }
    return 0;
}

/* Names(name, kind, sharded=False) */
static PyObject *names_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "kind", "sharded", NULL};
    const char *name;
    Py_ssize_t nlen;
    long kind;
    int sharded = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#l|p:Names", kwlist, &name, &nlen, &kind,
                                     &sharded))
        return NULL;
    char why[128];
    if (hl_name_check(name, (size_t)nlen, why, sizeof why))
        return raise_code(HILOCK_EINVAL, why);
    const char *s = name;
    if (check_kind(kind))
        return NULL;
    NamesObject *o = PyObject_New(NamesObject, type);
    if (!o)
        return NULL;
    o->ok = 0;
    o->kind = (hilock_kind)kind;
    int rc = hl_names_init(&o->n, s);
    if (rc) {
        Py_DECREF(o);
        return raise_code(rc, "lock name");
    }
    o->ok = 1;
    if (sharded) {
        o->n.publish = "spublish";
        if (!hl_names_one_slot(&o->n)) {
            Py_DECREF(o);
            return raise_code(HILOCK_EINVAL, "empty or unclosed hash tag: on a cluster the "
                                             "lock's companion keys would land in another slot");
        }
    }
    return (PyObject *)o;
}

static void names_dealloc(PyObject *self)
{
    NamesObject *o = (NamesObject *)self;
    if (o->ok)
        hl_names_free(&o->n);
    generic_dealloc_tail(self);
}

/* a row read as an attribute (closure: the row) */
static PyObject *hb_attr(PyObject *self, void *row)
{
    PyObject *none = PyTuple_New(0);
    PyObject *r = none ? hb_invoke((const hb_fn *)row, self, none) : NULL;
    Py_XDECREF(none);
    return r;
}

#define HB_NATTR(py, fn, doc) {py, hb_attr, NULL, doc, (void *)&hb_lock_fns[HBL_##fn]}
static PyGetSetDef names_getset[] = {
    HB_NATTR("hold_channel", f_l_hold_channel,
             "the channel a holder listens on for its lock's unlock and force unlock"),
    HB_NATTR("name", f_l_name, "the lock's name"),
    HB_NATTR("kind", f_l_kind, "the lock kind (KIND_*)"),
    HB_NATTR("slot", f_l_slot, "the Redis Cluster slot of the lock and its companions"),
    {NULL, NULL, NULL, NULL, NULL}};

/* Owners are passed as str (from hold_owner()). */
static const char *check_owner(const char *o)
{
    return check_str(o, HL_OWNER_MAX - 1, "owner");
}

/* forward */
typedef struct {
    PyObject_HEAD
    hl_acquire a;
    PyObject *names; /* borrowed by the machine: kept alive here */
    int ok;
    int resent;
    char owner[HL_OWNER_MAX];
    /* a machine made by Unsettled.before to settle an earlier attempt: its
     * record (marked settling) and the record set (_engine_holds.c) */
    PyObject *utable;
    hl_unsettled_acq *urec;
} AcquireObject;

/* _engine_holds.c: the end of the settle of a recorded attempt (a
 * resettle machine's, or a Settle's), and an attempt recorded settling */
static void unsettled_end_rec(PyObject **utable, hl_unsettled_acq **urec, int settled);
#define unsettled_end(m, settled) unsettled_end_rec(&(m)->utable, &(m)->urec, settled)
static hl_unsettled_acq *unsettled_put_settling(PyObject *table, AcquireObject *m);

/* n.acquire(owner, wait_ms, lease_ms, window_ms, latch_epoch=-1, latch_seq=0,
 *           latch_ttl_ms=0, line_window_ms=0) -> Acquire
 * line_window_ms > 0 (with wait_ms 0): a multi-lock member's one try that
 * joins a fair lock's line (hl_acquire_set_line; see ml_line_window).
 * latch_epoch >= 0: every attempt of this call is idempotent under the
 * owner's acquire latch (hl_acquire_latch_arg: epoch = the client's count of
 * attempts whose reply was lost, seq = unique per call within the client),
 * so an attempt lost with its connection is settled (on_reply_lost). */
/* an acquire machine (names.acquire's checks and construction) */
static PyObject *acquire_make(PyObject *self, const char *owner, long long wait,
                              long long lease, long long window, long long epoch,
                              long long seq, long long latch_ttl, long long line)
{
    NamesObject *n = (NamesObject *)self;
    const char *ow = check_owner(owner);
    if (!ow || check_range(wait, -1, HILOCK_MAX_TIME_MS, "wait_ms") ||
        check_range(lease, 1, HILOCK_MAX_TIME_MS, "lease_ms") ||
        check_range(window, 1, HILOCK_MAX_TIME_MS, "window_ms") ||
        check_range(line, -1, HILOCK_MAX_TIME_MS, "line_window_ms"))
        return NULL;
    if (epoch >= 0 && (check_range(seq, 0, INT64_MAX, "latch_seq") ||
                       check_range(latch_ttl, 1, HILOCK_MAX_TIME_MS, "latch_ttl_ms")))
        return NULL;
    AcquireObject *m = PyObject_New(AcquireObject, AcquireType);
    if (!m)
        return NULL;
    m->ok = 0;
    m->resent = 0;
    m->utable = NULL;
    m->urec = NULL;
    Py_INCREF(self);
    m->names = self;
    memcpy(m->owner, ow, strlen(ow) + 1);
    if (hl_acquire_init(&m->a, n->kind, &n->n, m->owner, wait, lease, window, hb_mono_ms()) != 0) {
        hl_acquire_free(&m->a);
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    m->ok = 1;
    hl_acquire_set_line(&m->a, line);
    if (epoch >= 0) {
        size_t len = strlen(n->n.name) + 2 * HL_OWNER_MAX + 128;
        char *latch = malloc(len);
        if (!latch) {
            Py_DECREF(m);
            return PyErr_NoMemory();
        }
        int rc = hl_acquire_latch_arg(latch, len, &n->n, m->owner, (uint64_t)epoch,
                                      (uint64_t)seq);
        if (rc == 0)
            rc = hl_acquire_set_latch(&m->a, latch, latch_ttl);
        free(latch);
        if (rc) {
            Py_DECREF(m);
            return raise_code(rc, "acquire latch");
        }
    }
    return (PyObject *)m;
}

static PyObject *names_acquire(PyObject *self, PyObject *args)
{
    const char *owner;
    long long wait, lease, window, epoch = -1, seq = 0, latch_ttl = 0, line = 0;
    if (!PyArg_ParseTuple(args, "sLLL|LLLL:acquire", &owner, &wait, &lease, &window, &epoch,
                          &seq, &latch_ttl, &line))
        return NULL;
    return acquire_make(self, owner, wait, lease, window, epoch, seq, latch_ttl, line);
}

typedef struct {
    PyObject_HEAD
    hl_release m;
    PyObject *names;
    int ok;
    char owner[HL_OWNER_MAX];
} ReleaseObject;

/* a release machine (names.release's checks and construction) */
static PyObject *release_make(PyObject *self, const char *owner, long long lease,
                              long long wd, const char *rid, long long cmdt, long long timeout)
{
    NamesObject *n = (NamesObject *)self;
    const char *ow = check_owner(owner);
    const char *r = ow ? check_str(rid, 128, "request id") : NULL;
    if (!r || check_range(lease, 0, HILOCK_MAX_TIME_MS, "acquired_lease_ms") ||
        check_range(wd, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms") ||
        check_range(cmdt, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms") ||
        check_range(timeout, 0, HILOCK_MAX_TIME_MS, "timeout_ms"))
        return NULL;
    ReleaseObject *m = PyObject_New(ReleaseObject, ReleaseType);
    if (!m)
        return NULL;
    m->ok = 0;
    Py_INCREF(self);
    m->names = self;
    memcpy(m->owner, ow, strlen(ow) + 1);
    int rc = hl_release_init(&m->m, n->kind, &n->n, m->owner, lease, wd, r, cmdt, timeout,
                             hb_mono_ms());
    m->ok = 1;
    if (rc == HILOCK_ENOMEM) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    return (PyObject *)m;
}

/* n.release(owner, acquired_lease_ms, watchdog_lease_ms, request_id,
 *           command_timeout_ms, timeout_ms=0) */
static PyObject *names_release(PyObject *self, PyObject *args)
{
    const char *owner, *rid;
    long long lease, wd, cmdt, timeout = 0;
    if (!PyArg_ParseTuple(args, "sLLsL|L:release", &owner, &lease, &wd, &rid, &cmdt, &timeout))
        return NULL;
    return release_make(self, owner, lease, wd, rid, cmdt, timeout);
}

/* ---- engine objects (bindings/engine_fns.h hb_classes) ---- */

static int add_type(PyObject *m, PyTypeObject **slot, PyType_Spec *spec, const char *name);

typedef struct {
    PyObject_HEAD
    PyObject *keep; /* the Names whose names the state borrows, or NULL */
    int live;       /* its HB_NEW row filled the state: fini empties it */
    _Alignas(max_align_t) unsigned char state[];
} HbObject;

static PyTypeObject *hb_types[HBC_COUNT];

static void hbobj_dealloc(PyObject *self)
{
    HbObject *o = (HbObject *)self;
    for (int c = 1; c < HBC_COUNT; c++)
        if (Py_TYPE(self) == hb_types[c] && o->live && hb_classes[c].fini)
            hb_classes[c].fini(o->state);
    Py_XDECREF(o->keep);
    generic_dealloc_tail(self);
}

/* a new object of class c (state zeroed), keeping keep; NULL: an exception */
static HbObject *hbobj_new(int c, PyObject *keep)
{
    HbObject *o = PyObject_New(HbObject, hb_types[c]);
    if (!o)
        return NULL;
    memset(o->state, 0, hb_classes[c].size);
    o->live = 0;
    Py_XINCREF(keep);
    o->keep = keep;
    return o;
}

/* tp_new of a class with a Python constructor: its HB_NEW row */
static PyObject *hbobj_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    for (int i = 0; hb_obj_fns[i].fn; i++)
        if ((hb_obj_fns[i].flags & HB_NEW) && hb_types[HB_CLS(&hb_obj_fns[i])] == type &&
            hb_obj_fns[i].args[0] != 'N') {
            if (kw && PyDict_Size(kw)) {
                PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments",
                             hb_obj_fns[i].py);
                return NULL;
            }
            return hb_invoke(&hb_obj_fns[i], NULL, args);
        }
    return no_new(type, args, kw);
}

/* one wrapper per row: a method (or a lock's method making an object) */
#define HB_PYOWRAP(fn, py, lua, args, words, flags, cls, doc)                               \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_obj_fns[HBO_##fn], self, a);                                    \
    }
HB_OBJ_FNS(HB_PYOWRAP)
#define HB_PYOPTR(fn, py, lua, args, words, flags, cls, doc) py_##fn,
static const PyCFunction hbo_wrappers[] = {HB_OBJ_FNS(HB_PYOPTR)};

/* every class's methods and attributes, each list ended by a zeroed entry */
static PyMethodDef hbo_methods[HBO_COUNT + HBC_COUNT];
static PyGetSetDef hbo_getset[HBO_COUNT + HBC_COUNT];

static int hb_add_types(PyObject *m)
{
    int nm = 0, ng = 0;
    for (int c = 1; c < HBC_COUNT; c++) {
        PyMethodDef *meth = &hbo_methods[nm];
        PyGetSetDef *gs = &hbo_getset[ng];
        for (int i = 0; hb_obj_fns[i].fn; i++) {
            const hb_fn *f = &hb_obj_fns[i];
            if (HB_CLS(f) != c || f->args[0] != 'O' || !f->py)
                continue;
            if (f->flags & HB_PY_ATTR)
                hbo_getset[ng++] = (PyGetSetDef){f->py, hb_attr, NULL, f->doc, (void *)f};
            else
                hbo_methods[nm++] = (PyMethodDef){f->py, hbo_wrappers[i], METH_VARARGS, f->doc};
        }
        nm++, ng++; /* the ends */
        PyType_Slot slots[] = {{Py_tp_new, hbobj_tp_new},
                               {Py_tp_dealloc, hbobj_dealloc},
                               {Py_tp_methods, meth},
                               {Py_tp_getset, gs},
                               {Py_tp_doc, (void *)hb_classes[c].doc},
                               {0, NULL}};
        static char names[HBC_COUNT][64]; /* the type keeps its name's pointer */
        snprintf(names[c], sizeof names[c], "hilock._engine.%s", hb_classes[c].py);
        PyType_Spec spec = {names[c], (int)(sizeof(HbObject) + hb_classes[c].size), 0,
                            Py_TPFLAGS_DEFAULT, slots};
        if (add_type(m, &hb_types[c], &spec, hb_classes[c].py))
            return -1;
    }
    return 0;
}

/* the methods of hb_lock_fns named for Python: one wrapper each */
#define HB_PYWRAP(fn, py, lua, args, words, doc)                                            \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_lock_fns[HBL_##fn], self, a);                                   \
    }
HB_LOCK_FNS(HB_PYWRAP)
#define HB_PYPTR(fn, py, lua, args, words, doc) py_##fn,
static const PyCFunction names_wrappers[] = {HB_LOCK_FNS(HB_PYPTR)};

/* the hand-written methods, then hb_lock_fns' and hb_obj_fns' (filled once, at import) */
static PyMethodDef names_methods[8 + HBL_COUNT + HBO_COUNT] = {
    {"acquire", names_acquire, METH_VARARGS,
     "acquire(owner, wait_ms, lease_ms, window_ms, latch_epoch=-1, latch_seq=0, latch_ttl_ms=0,"
     " line_window_ms=0) -> Acquire"},
    {"release", names_release, METH_VARARGS,
     "release(owner, acquired_lease_ms, watchdog_lease_ms, request_id, command_timeout_ms,"
     " timeout_ms=0) -> Release"}};

static void names_methods_fill(void)
{
    int n = 0;
    while (names_methods[n].ml_name)
        n++;
    for (int i = 0; i < HBL_COUNT; i++)
        if (hb_lock_fns[i].py)
            names_methods[n++] = (PyMethodDef){hb_lock_fns[i].py, names_wrappers[i],
                                               METH_VARARGS, hb_lock_fns[i].doc};
    for (int i = 0; i < HBO_COUNT; i++)
        if (hb_obj_fns[i].py && hb_obj_fns[i].args[0] == 'N')
            names_methods[n++] = (PyMethodDef){hb_obj_fns[i].py, hbo_wrappers[i], METH_VARARGS,
                                               hb_obj_fns[i].doc};
}

static PyType_Slot names_slots[] = {
    {Py_tp_new, names_new},
    {Py_tp_dealloc, names_dealloc},
    {Py_tp_methods, names_methods},
    {Py_tp_getset, names_getset},
    {Py_tp_doc, "Names(name, kind, sharded=False): one lock's keys and channels."},
    {0, NULL}};

static PyType_Spec names_spec = {"hilock._engine.Names", sizeof(NamesObject), 0,
                                 Py_TPFLAGS_DEFAULT, names_slots};

/* ------------------------------------------------------------------ */
/* Acquire                                                             */
/* ------------------------------------------------------------------ */


static void acquire_dealloc(PyObject *self)
{
    AcquireObject *m = (AcquireObject *)self;
    unsettled_end(m, 0); /* dropped before its end: the record stays, not settling */
    if (m->ok)
        hl_acquire_free(&m->a);
    Py_XDECREF(m->names);
    generic_dealloc_tail(self);
}

static PyObject *channel_str(const char *ch)
{
    if (!ch)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(ch, (Py_ssize_t)strlen(ch), "surrogateescape");
}

/* m.next() ->
 *   (ACT_SEND, bytes, is_attempt)   send, read one reply, m.on_reply(reply)
 *   (ACT_SUBSCRIBE, channel)        subscribe, then m.on_subscribed(ok)
 *   (ACT_WAIT, channel, sleep_ms)   wait for a wake-up on channel (sleep_ms
 *                                   -1: no limit), then m.on_wake()
 *   (ACT_UNSUBSCRIBE, channel)      drop the subscription
 *   (ACT_DONE, result, hold_count, token)   result 0 = acquired */
static PyObject *acquire_next(PyObject *self, PyObject *unused)
{
    (void)unused;
    AcquireObject *m = (AcquireObject *)self;
    hl_action act = hl_acquire_next(&m->a, hb_mono_ms());
    switch (act) {
    case HL_ACT_SEND: {
        m->resent = 0;
        PyObject *b = cmd_bytes(&m->a.cmd, 0);
        if (!b)
            return NULL;
        return Py_BuildValue("(iNO)", ACT_SEND, b,
                             hl_cmd_is_attempt(&m->a.cmd) ? Py_True : Py_False);
    }
    case HL_ACT_SUBSCRIBE:
        return Py_BuildValue("(iN)", ACT_SUBSCRIBE, channel_str(m->a.channel));
    case HL_ACT_WAIT:
        return Py_BuildValue("(iNL)", ACT_WAIT, channel_str(m->a.channel),
                             (long long)m->a.sleep_ms);
    case HL_ACT_UNSUBSCRIBE:
        return Py_BuildValue("(iN)", ACT_UNSUBSCRIBE, channel_str(m->a.channel));
    case HL_ACT_DONE:
    default:
        return Py_BuildValue("(iiLL)", ACT_DONE, m->a.result, (long long)m->a.hold_count,
                             (long long)m->a.token);
    }
}

/* m.sent() -> (ACT_SEND, bytes, is_attempt): the command it last asked
 * to send, again (Direct sent it without making the tuple) */
static PyObject *acquire_sent(PyObject *self, PyObject *unused)
{
    (void)unused;
    AcquireObject *m = (AcquireObject *)self;
    PyObject *b = cmd_bytes(&m->a.cmd, 0);
    if (!b)
        return NULL;
    return Py_BuildValue("(iNO)", ACT_SEND, b,
                         hl_cmd_is_attempt(&m->a.cmd) ? Py_True : Py_False);
}

/* m.on_reply(reply) -> None, or bytes to send again (the script's body
 * after NOSCRIPT; feed that reply to on_reply too) */
static PyObject *acquire_on_reply(PyObject *self, PyObject *arg)
{
    AcquireObject *m = (AcquireObject *)self;
    redisReply *r = get_reply(arg);
    if (!r)
        return NULL;
    if (hl_reply_is_noscript(r) && m->a.cmd.script >= 0 && !m->resent) {
        m->resent = 1;
        return cmd_bytes(&m->a.cmd, 1);
    }
    hl_acquire_on_reply(&m->a, r, hb_mono_ms());
    Py_RETURN_NONE;
}

static int arg_code(PyObject *arg, int *code)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v > -1 || v < -100) {
        PyErr_SetString(PyExc_ValueError, "expected a negative HILOCK_E* code");
        return -1;
    }
    *code = (int)v;
    return 0;
}

/* m.on_error(code): the command was not sent or no reply can come */
static PyObject *acquire_on_error(PyObject *self, PyObject *arg)
{
    int code;
    if (arg_code(arg, &code))
        return NULL;
    hl_acquire_on_error(&((AcquireObject *)self)->a, code, hb_mono_ms());
    Py_RETURN_NONE;
}

/* m.on_reply_lost(code): sent, and the connection died before the reply */
static PyObject *acquire_on_reply_lost(PyObject *self, PyObject *arg)
{
    int code;
    if (arg_code(arg, &code))
        return NULL;
    hl_acquire_on_reply_lost(&((AcquireObject *)self)->a, code, hb_mono_ms());
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    hl_settle s;
    int ok;
    /* the session's record of its attempt (Unsettled), ended with it */
    PyObject *utable;
    hl_unsettled_acq *urec;
} SettleObject;

/* m.on_unknown(code, request_id, command_timeout_ms[, unsettled]) -> Settle | None:
 * the reply of the attempt just sent did not come in time; drive the
 * returned machine on THAT connection (None: nothing to settle).
 * unsettled: the client's Unsettled, where the attempt is recorded as
 * being settled until the Settle's end (its outcome known, or given up:
 * then settled again before the owner's next acquire). */
static PyObject *acquire_on_unknown(PyObject *self, PyObject *args)
{
    AcquireObject *m = (AcquireObject *)self;
    int code;
    const char *rid;
    long long cmdt;
    PyObject *table = NULL;
    if (!PyArg_ParseTuple(args, "isL|O:on_unknown", &code, &rid, &cmdt, &table))
        return NULL;
    const char *r = check_str(rid, 128, "request id");
    if (!r || check_range(cmdt, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms") ||
        check_range(code, -100, -1, "code"))
        return NULL;
    SettleObject *s = PyObject_New(SettleObject, SettleType);
    if (!s)
        return NULL;
    s->ok = 0;
    s->utable = NULL;
    s->urec = NULL;
    int rc = hl_settle_init(&s->s, &m->a.cmd, ((NamesObject *)m->names)->n.publish, r, cmdt,
                            hb_mono_ms());
    hl_acquire_on_unknown(&m->a, code, hb_mono_ms());
    if (rc == HILOCK_ENOMEM) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    if (rc) {
        Py_DECREF(s);
        Py_RETURN_NONE;
    }
    s->ok = 1;
    if (table && (s->urec = unsettled_put_settling(table, m)) != NULL) {
        Py_INCREF(table);
        s->utable = table;
    }
    return (PyObject *)s;
}

static PyObject *acquire_on_subscribed(PyObject *self, PyObject *arg)
{
    int ok = PyObject_IsTrue(arg);
    if (ok < 0)
        return NULL;
    hl_acquire_on_subscribed(&((AcquireObject *)self)->a, ok, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *acquire_on_wake(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_acquire_on_wake(&((AcquireObject *)self)->a, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *acquire_on_resubscribe(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_acquire_on_resubscribe(&((AcquireObject *)self)->a, hb_mono_ms());
    Py_RETURN_NONE;
}

/* m.cancel(): the caller gave up; call between actions, never with a
 * command in flight. The machine then leaves the fair line, unsubscribes
 * and ends with HILOCK_ECANCELED (unless it already had its outcome). */
static PyObject *acquire_cancel(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_acquire_cancel(&((AcquireObject *)self)->a, hb_mono_ms());
    Py_RETURN_NONE;
}

/* m.last_ttl() -> ms: the holder's PTTL the last refused attempt answered
 * (-1 no expiry; what a multi-lock's wait is bounded by, ml_wait_ms) */
static PyObject *acquire_last_ttl(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLongLong(((AcquireObject *)self)->a.last_ttl);
}

static PyMethodDef acquire_methods[] = {
    {"next", acquire_next, METH_NOARGS, "next() -> (ACT_*, ...)"},
    {"sent", acquire_sent, METH_NOARGS, "sent() -> the send action it is in (Direct's)"},
    {"last_ttl", acquire_last_ttl, METH_NOARGS,
     "last_ttl() -> ms: the holder's PTTL the last refused attempt answered"},
    {"on_reply", acquire_on_reply, METH_O, "on_reply(reply) -> None or bytes to resend"},
    {"on_error", acquire_on_error, METH_O, "on_error(code)"},
    {"on_reply_lost", acquire_on_reply_lost, METH_O, "on_reply_lost(code)"},
    {"on_unknown", acquire_on_unknown, METH_VARARGS,
     "on_unknown(code, request_id, command_timeout_ms) -> Settle or None"},
    {"on_subscribed", acquire_on_subscribed, METH_O, "on_subscribed(ok)"},
    {"on_wake", acquire_on_wake, METH_NOARGS, "on_wake()"},
    {"on_resubscribe", acquire_on_resubscribe, METH_NOARGS, "on_resubscribe()"},
    {"cancel", acquire_cancel, METH_NOARGS, "cancel()"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot acquire_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, acquire_dealloc},
    {Py_tp_methods, acquire_methods},
    {Py_tp_doc, "The acquire machine (made by Names.acquire)."},
    {0, NULL}};

static PyType_Spec acquire_spec = {"hilock._engine.Acquire", sizeof(AcquireObject), 0,
                                   Py_TPFLAGS_DEFAULT, acquire_slots};

/* ------------------------------------------------------------------ */
/* Release                                                             */
/* ------------------------------------------------------------------ */

static void release_dealloc(PyObject *self)
{
    ReleaseObject *m = (ReleaseObject *)self;
    if (m->ok)
        hl_release_free(&m->m);
    Py_XDECREF(m->names);
    generic_dealloc_tail(self);
}

/* m.next() -> (ACT_SEND, bytes, timeout_ms (0: the driver's own))
 *           | (ACT_DONE, result, remaining, still_held, renew, unconfirmed)
 * renew: keep renewing the hold (hl_release.renew: not after a release no
 * try got an answer to); unconfirmed: no try got an answer */
static PyObject *release_next(PyObject *self, PyObject *unused)
{
    (void)unused;
    ReleaseObject *m = (ReleaseObject *)self;
    if (hl_release_next(&m->m, hb_mono_ms()) == HL_ACT_SEND) {
        PyObject *b = cmd_bytes(&m->m.cmd, 0);
        if (!b)
            return NULL;
        return Py_BuildValue("(iNL)", ACT_SEND, b, (long long)m->m.timeout_ms);
    }
    return Py_BuildValue("(iiLOOO)", ACT_DONE, m->m.result, (long long)m->m.remaining,
                         m->m.still_held ? Py_True : Py_False, m->m.renew ? Py_True : Py_False,
                         m->m.unconfirmed ? Py_True : Py_False);
}

/* m.sent() -> (ACT_SEND, bytes, timeout_ms): the command it last asked to
 * send, again (Direct sent it without making the tuple) */
static PyObject *release_sent(PyObject *self, PyObject *unused)
{
    (void)unused;
    ReleaseObject *m = (ReleaseObject *)self;
    PyObject *b = cmd_bytes(&m->m.cmd, 0);
    if (!b)
        return NULL;
    return Py_BuildValue("(iNL)", ACT_SEND, b, (long long)m->m.timeout_ms);
}

static PyObject *release_on_reply(PyObject *self, PyObject *arg)
{
    redisReply *r = get_reply(arg);
    if (!r)
        return NULL;
    hl_release_on_reply(&((ReleaseObject *)self)->m, r, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *release_on_error(PyObject *self, PyObject *arg)
{
    int code;
    if (arg_code(arg, &code))
        return NULL;
    hl_release_on_error(&((ReleaseObject *)self)->m, code, hb_mono_ms());
    Py_RETURN_NONE;
}

/* m.known_lost(): the client knows this hold was lost (found gone or in
 * doubt) before this release: a fair unlock's "released" is then reported
 * as not owner (hl_release_known_lost) */
static PyObject *release_known_lost(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_release_known_lost(&((ReleaseObject *)self)->m);
    Py_RETURN_NONE;
}

static PyMethodDef release_methods[] = {
    {"known_lost", release_known_lost, METH_NOARGS,
     "known_lost(): the hold was lost before this release (a fair 'released' is not owner)"},
    {"next", release_next, METH_NOARGS, "next() -> (ACT_*, ...)"},
    {"sent", release_sent, METH_NOARGS, "sent() -> the send action it is in (Direct's)"},
    {"on_reply", release_on_reply, METH_O, "on_reply(reply)"},
    {"on_error", release_on_error, METH_O, "on_error(code)"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot release_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, release_dealloc},
    {Py_tp_methods, release_methods},
    {Py_tp_doc, "The release machine (made by Names.release)."},
    {0, NULL}};

static PyType_Spec release_spec = {"hilock._engine.Release", sizeof(ReleaseObject), 0,
                                   Py_TPFLAGS_DEFAULT, release_slots};

/* ------------------------------------------------------------------ */
/* Settle                                                              */
/* ------------------------------------------------------------------ */

static void settle_dealloc(PyObject *self)
{
    SettleObject *s = (SettleObject *)self;
    unsettled_end_rec(&s->utable, &s->urec, 0); /* dropped before its end */
    if (s->ok)
        hl_settle_free(&s->s);
    generic_dealloc_tail(self);
}

/* s.next() -> (ACT_WAIT, ms): read the next reply on the attempt's
 *             connection (up to ms), then on_reply / on_error
 *           | (ACT_SEND, bytes, reconnect): write them on that connection (no
 *             read yet); reconnect: that connection is dead, open a new one
 *             to the same server and write them there
 *           An ACT_WAIT while the connection is dead (s.reconnect, after
 *           on_error) is a pause: nothing to read, call next() after ms.
 *           | (ACT_DONE, outcome): SETTLE_NOTHING / _RELEASED / _LEFT_LINE */
static PyObject *settle_next(PyObject *self, PyObject *unused)
{
    (void)unused;
    SettleObject *s = (SettleObject *)self;
    switch (hl_settle_next(&s->s, hb_mono_ms())) {
    case HL_ACT_WAIT:
        return Py_BuildValue("(iL)", ACT_WAIT, (long long)s->s.sleep_ms);
    case HL_ACT_SEND: {
        PyObject *b = cmd_bytes(&s->s.cmd, 0);
        if (!b)
            return NULL;
        return Py_BuildValue("(iNi)", ACT_SEND, b, s->s.reconnect);
    }
    default:
        unsettled_end_rec(&s->utable, &s->urec, s->s.settled);
        return Py_BuildValue("(ii)", ACT_DONE, (int)s->s.outcome);
    }
}

static PyObject *settle_on_reply(PyObject *self, PyObject *arg)
{
    redisReply *r = get_reply(arg);
    if (!r)
        return NULL;
    hl_settle_on_reply(&((SettleObject *)self)->s, r, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *settle_on_error(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_settle_on_error(&((SettleObject *)self)->s, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *settle_reconnect(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((SettleObject *)self)->s.reconnect);
}

static PyGetSetDef settle_getset[] = {
    {"reconnect", settle_reconnect, NULL,
     "the attempt's connection is dead: close it; the next send goes on a new one", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* hb_settle_fns, one wrapper each (filled once, at import) */
#define HB_PYXWRAP(fn, py, lua, args, words, doc)                                           \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_settle_fns[HBL_##fn], self, a);                                 \
    }
HB_SETTLE_FNS(HB_PYXWRAP)

/* the hand-written methods, then hb_settle_fns' */
static PyMethodDef settle_methods[4 + HBX_COUNT] = {
    {"next", settle_next, METH_NOARGS, "next() -> (ACT_*, ...)"},
    {"on_reply", settle_on_reply, METH_O, "on_reply(reply)"},
    {"on_error", settle_on_error, METH_NOARGS, "on_error()"}};

static void settle_methods_fill(void)
{
    static const PyCFunction wrappers[] = {HB_SETTLE_FNS(HB_PYPTR)};
    for (int i = 0; i < HBX_COUNT; i++)
        settle_methods[3 + i] = (PyMethodDef){hb_settle_fns[i].py, wrappers[i], METH_VARARGS,
                                              hb_settle_fns[i].doc};
}

static PyType_Slot settle_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, settle_dealloc},
    {Py_tp_methods, settle_methods},
    {Py_tp_getset, settle_getset},
    {Py_tp_doc, "Settles an attempt whose reply never came (Acquire.on_unknown)."},
    {0, NULL}};

static PyType_Spec settle_spec = {"hilock._engine.Settle", sizeof(SettleObject), 0,
                                  Py_TPFLAGS_DEFAULT, settle_slots};

/* ------------------------------------------------------------------ */
/* module functions                                                    */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* the engine's free functions: hb_fns (bindings/engine_fns.h)         */
/* ------------------------------------------------------------------ */

static PyObject *hb_value(hb_out *o, int *pos)
{
    const hb_val *x = hb_next(o, pos, HB_PY);
    switch (x->t) {
    case HB_INT:
    case HB_WORD:
    case HB_ERR:
        return PyLong_FromLongLong((long long)x->i);
    case HB_BOOL:
        return PyBool_FromLong((long)x->i);
    case HB_STR:
        return PyUnicode_DecodeUTF8(hb_sval(o, x), (Py_ssize_t)x->len, "surrogateescape");
    case HB_CMD:
        return cmd_bytes(x->c ? x->c : &o->cmd[x->i], (int)x->len);
    case HB_HOLD:
        return hold_key(x->h);
    case HB_LIST:
    case HB_TUPLE: {
        PyObject *l = x->t == HB_LIST ? PyList_New((Py_ssize_t)x->i) : PyTuple_New((Py_ssize_t)x->i);
        for (Py_ssize_t k = 0; l && k < (Py_ssize_t)x->i; k++) {
            PyObject *v = hb_value(o, pos);
            if (!v || (x->t == HB_LIST ? PyList_SetItem(l, k, v) : PyTuple_SetItem(l, k, v))) {
                Py_CLEAR(l);
                break;
            }
        }
        return l;
    }
    case HB_DICT: {
        PyObject *d = PyDict_New();
        for (int64_t k = 0; d && k < x->i; k++) {
            PyObject *key = hb_value(o, pos), *v = key ? hb_value(o, pos) : NULL;
            if (!v || PyDict_SetItem(d, key, v))
                Py_CLEAR(d);
            Py_XDECREF(key);
            Py_XDECREF(v);
        }
        return d;
    }
    default:
        Py_RETURN_NONE;
    }
}

/* One argument of letter c from v into *a; -1 with an exception set. */
static int hb_parse(const hb_fn *f, char c, PyObject *v, hb_arg *a)
{
    switch (c) {
    case 'i':
    case 'e':
        a->i = PyLong_AsLongLong(v);
        if (a->i == -1 && PyErr_Occurred())
            return -1;
        if (c == 'e') {
            int n = 0;
            while (f->words[n])
                n++;
            if (a->i < 0 || a->i >= n) {
                PyErr_Format(PyExc_ValueError, "%s: no such outcome %lld", f->py, (long long)a->i);
                return -1;
            }
        }
        return 0;
    case 'c': {
        int code;
        if (arg_code(v, &code))
            return -1;
        a->i = code;
        return 0;
    }
    case 'u':
        a->i = (int64_t)PyLong_AsUnsignedLongLongMask(v);
        return PyErr_Occurred() ? -1 : 0;
    case 'b':
        a->i = PyObject_IsTrue(v);
        return a->i < 0 ? -1 : 0;
    case 't':
        a->i = v == Py_None ? -1 : PyObject_IsTrue(v);
        return a->i == -1 && v != Py_None ? -1 : 0;
    case 'r':
        a->r = get_reply(v);
        return a->r ? 0 : -1;
    case 'z':
        if (v == Py_None)
            return 0;
        /* fall through */
    default: { /* 's', 'S' */
        Py_ssize_t len;
        if (!PyArg_Parse(v, "s#", &a->s, &len))
            return -1;
        a->len = (size_t)len;
        if (c != 'S' && memchr(a->s, 0, a->len)) {
            PyErr_SetString(PyExc_ValueError, "embedded null character");
            return -1;
        }
        return 0;
    }
    }
}

/* row f called with args (and self, the Names of an 'N' row) */
static PyObject *hb_invoke(const hb_fn *f, PyObject *self, PyObject *args)
{
    Py_ssize_t n = PyTuple_Size(args), min = -1, k = 0, skip = 0;
    hb_arg a[HB_MAXARGS];
    memset(a, 0, sizeof a);
    for (const char *c = f->args; *c; c++) {
        if (*c == '|') {
            min = k;
            continue;
        }
        if (strchr("NHLUXOM", *c)) { /* a method: the type checked self */
            if (*c == 'O')
                a[0].p = ((HbObject *)self)->state;
            else if (*c == 'M')
                a[0].m = semnames_of(self, &a[0].skind);
            else if (*c == 'N') {
                a[0].n = &((NamesObject *)self)->n;
                a[0].kind = ((NamesObject *)self)->kind;
            } else if (*c == 'H')
                a[0].t = holds_table(self);
            else if (*c == 'U')
                a[0].un = unsettled_of(self);
            else if (*c == 'L')
                a[0].sl = sublive_of(self);
            else
                a[0].st = &((SettleObject *)self)->s;
            skip = 1;
            continue;
        }
        if (k < n && (*c == 'K' ? holds_lookup(self, PyTuple_GetItem(args, k), &a[k + skip].h)
                                : hb_parse(f, *c, PyTuple_GetItem(args, k), &a[k + skip])))
            return NULL;
        a[k + skip].set = k < n;
        k++;
    }
    if (n > k || n < (min < 0 ? k : min)) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", f->py,
                     min < 0 ? k : min, k, n);
        return NULL;
    }
    hb_out o;
    hb_init(&o);
    PyObject *res = NULL;
    HbObject *obj = NULL;
    if (f->flags & HB_NEW) { /* the object its row fills; it keeps a Names self */
        if (!(obj = hbobj_new(HB_CLS(f), f->args[0] == 'N' ? self : NULL)))
            return NULL;
        o.self = obj->state;
    }
    int rc = f->fn(a, &o);
    if (obj && !rc && !o.oom) {
        obj->live = 1;
        res = (PyObject *)obj;
        obj = NULL;
    } else if (o.oom)
        PyErr_NoMemory();
    else if (rc && o.bad)
        PyErr_SetString(PyExc_ValueError, o.why);
    else if (rc)
        raise_code(o.err, o.msg);
    else if (o.n == 0)
        Py_INCREF(Py_None), res = Py_None;
    else {
        PyObject *l = PyList_New(0);
        for (int pos = 0; l && pos < o.n;) {
            if (o.v[pos].only == HB_LUA) {
                pos++;
                continue;
            }
            PyObject *v = hb_value(&o, &pos);
            if (!v || PyList_Append(l, v)) {
                Py_XDECREF(v);
                Py_CLEAR(l);
                break;
            }
            Py_DECREF(v);
        }
        if (l && PyList_Size(l) == 1)
            Py_INCREF(res = PyList_GetItem(l, 0));
        else if (l)
            res = PyList_AsTuple(l);
        Py_XDECREF(l);
    }
    Py_XDECREF(obj);
    hb_free(&o);
    return res;
}

/* a module function: self is the row's index in hb_fns */
static PyObject *hb_call(PyObject *self, PyObject *args)
{
    return hb_invoke(&hb_fns[PyLong_AsLong(self)], NULL, args);
}

/* hb_fns' rows named for Python, as module functions (filled once, at import) */
static PyMethodDef hb_defs[sizeof hb_fns / sizeof hb_fns[0]];

static int hb_add_fns(PyObject *m)
{
    for (int i = 0; hb_fns[i].fn; i++) {
        if (!hb_fns[i].py)
            continue;
        hb_defs[i] = (PyMethodDef){hb_fns[i].py, hb_call, METH_VARARGS, hb_fns[i].doc};
        PyObject *idx = PyLong_FromLong(i), *mod = PyModule_GetNameObject(m);
        PyObject *fn = idx && mod ? PyCFunction_NewEx(&hb_defs[i], idx, mod) : NULL;
        Py_XDECREF(idx);
        Py_XDECREF(mod);
        if (!fn || PyModule_AddObject(m, hb_fns[i].py, fn)) {
            Py_XDECREF(fn);
            return -1;
        }
    }
    return 0;
}

/* A release's request id (hb_release_rid) into buf; -1 with ValueError. */
static int release_rid(char *buf, size_t len, const char *client_id, long long pid,
                       long long latch_epoch, long long seq)
{
    hb_arg a[4] = {{.s = client_id}, {.i = pid}, {.i = latch_epoch}, {.i = seq}};
    hb_out o;
    hb_init(&o);
    if (hb_release_rid(buf, len, a, &o) == 0)
        return 0;
    PyErr_SetString(PyExc_ValueError, o.why);
    return -1;
}

/* ml_wait_ms(redlock, members, validity_failed, backoff_ms, left_ms) -> ms
 * (-1: until a member's message): how long a failed multi-lock or Redlock
 * attempt sleeps (proto.h, hl_ml_wait_ms). members: a sequence of
 * (rc, ttl_ms, wakeable, line_window_ms), one per member. */
static PyObject *m_ml_wait_ms(PyObject *self, PyObject *args)
{
    (void)self;
    int redlock, validity_failed;
    PyObject *seq;
    long long backoff, left;
    if (!PyArg_ParseTuple(args, "pOpLL:ml_wait_ms", &redlock, &seq, &validity_failed, &backoff,
                          &left))
        return NULL;
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0)
        return NULL;
    if (n < 1 || n > 4096) {
        PyErr_SetString(PyExc_ValueError, "ml_wait_ms: 1 to 4096 members");
        return NULL;
    }
    hl_ml_member *mb = calloc((size_t)n, sizeof *mb);
    if (!mb)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long long ttl, window;
        int wakeable, ok;
        PyObject *item = PySequence_GetItem(seq, i);
        ok = item && PyArg_ParseTuple(item, "iLpL:ml_wait_ms member", &mb[i].rc, &ttl,
                                      &wakeable, &window);
        Py_XDECREF(item);
        if (!ok) {
            free(mb);
            return NULL;
        }
        mb[i].ttl_ms = ttl;
        mb[i].wakeable = wakeable;
        mb[i].line_window_ms = window;
    }
    int64_t s = hl_ml_wait_ms(redlock, mb, (size_t)n, validity_failed, backoff, left);
    free(mb);
    return PyLong_FromLongLong(s);
}

/* ------------------------------------------------------------------ */
/* ReplyFuture: the future of one reply, for hilock.aio's connections  */
/* ------------------------------------------------------------------ */

/* asyncio.Future's protocol (what a Task awaits, cancels and is called
 * back by), plus wake_now(). asyncio.Future hands its done-callbacks to
 * loop.call_soon, so a task awaiting a reply runs one loop iteration after
 * the reply was read: a second pass through the selector for every round
 * trip. wake_now(), called by a connection's read callback, runs the
 * waiting task's wake-up there and then when no task is running (the
 * callback was called by the loop itself); anywhere else -- set_result,
 * cancel, or wake_now inside a task -- the callbacks go through call_soon
 * as asyncio.Future's do. Written in C because the per-reply Python frames
 * of a Python version cost what the saved iteration saves. */

typedef struct {
    PyObject_HEAD
    PyObject *loop;
    PyObject *cbs; /* list of (fn, context) tuples, or NULL */
    int state;     /* 0 pending, 1 done, 2 cancelled */
    char blocking; /* _asyncio_future_blocking */
} FutObject;

static PyTypeObject *FutType;
/* asyncio's and contextvars' functions and exceptions, looked up once (the
   first future made) and kept for the process's life, as the types are */
static PyObject *aio_current_task, *aio_cancelled, *aio_invalid_state, *cv_copy_context;
/* Python 3.9-3.11 write asyncio.current_task in Python, over the dict
   asyncio.tasks._current_tasks (loop -> running task): read the dict then,
   a Python call per reply saved; later versions have it in C: call it */
static PyObject *aio_current_tasks;
static PyObject *s_run; /* "run", interned: Context.run, called per reply */
static PyObject *s_context; /* "context", interned: add_done_callback's keyword */

static int fut_imports(void)
{
    if (aio_current_task)
        return 0;
    PyObject *a = PyImport_ImportModule("asyncio");
    PyObject *cv = a ? PyImport_ImportModule("contextvars") : NULL;
    if (!cv) {
        Py_XDECREF(a);
        return -1;
    }
    PyObject *ct = PyObject_GetAttrString(a, "current_task");
    PyObject *ce = PyObject_GetAttrString(a, "CancelledError");
    PyObject *ie = PyObject_GetAttrString(a, "InvalidStateError");
    PyObject *cc = PyObject_GetAttrString(cv, "copy_context");
    Py_DECREF(a);
    Py_DECREF(cv);
    if (!ct || !ce || !ie || !cc) {
        Py_XDECREF(ct);
        Py_XDECREF(ce);
        Py_XDECREF(ie);
        Py_XDECREF(cc);
        return -1;
    }
    if ((!s_run && !(s_run = PyUnicode_InternFromString("run"))) ||
        (!s_context && !(s_context = PyUnicode_InternFromString("context")))) {
        Py_DECREF(ct);
        Py_DECREF(ce);
        Py_DECREF(ie);
        Py_DECREF(cc);
        return -1;
    }
    PyObject *tasks = PyImport_ImportModule("asyncio.tasks");
    PyObject *cur = tasks ? PyObject_GetAttrString(tasks, "_current_tasks") : NULL;
    Py_XDECREF(tasks);
    PyErr_Clear();
    /* the dict only where current_task itself is a plain Python function */
    if (cur && (!PyDict_Check(cur) || !PyObject_HasAttrString(ct, "__code__")))
        Py_CLEAR(cur);
    aio_current_tasks = cur;
    aio_current_task = ct;
    aio_cancelled = ce;
    aio_invalid_state = ie;
    cv_copy_context = cc;
    return 0;
}

/* a pending ReplyFuture of loop */
static PyObject *fut_make(PyTypeObject *type, PyObject *loop)
{
    if (fut_imports() != 0)
        return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    FutObject *o = (FutObject *)alloc(type, 0);
    if (!o)
        return NULL;
    Py_INCREF(loop);
    o->loop = loop;
    o->cbs = NULL;
    o->state = 0;
    o->blocking = 0;
    return (PyObject *)o;
}

static PyObject *fut_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *loop;
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, "O:ReplyFuture", &loop)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ReplyFuture(loop) takes no keyword arguments");
        return NULL;
    }
    return fut_make(type, loop);
}

static int fut_traverse(PyObject *self, visitproc visit, void *arg)
{
    FutObject *o = (FutObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->loop);
    Py_VISIT(o->cbs);
    return 0;
}

static int fut_clear(PyObject *self)
{
    FutObject *o = (FutObject *)self;
    Py_CLEAR(o->loop);
    Py_CLEAR(o->cbs);
    return 0;
}

static void fut_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    fut_clear(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

/* loop.call_soon(fn, self, context=ctx) */
static int fut_call_soon(FutObject *o, PyObject *fn, PyObject *ctx)
{
    PyObject *meth = PyObject_GetAttrString(o->loop, "call_soon");
    PyObject *args = meth ? PyTuple_Pack(2, fn, (PyObject *)o) : NULL;
    PyObject *kw = args ? Py_BuildValue("{s:O}", "context", ctx) : NULL;
    PyObject *r = kw ? PyObject_Call(meth, args, kw) : NULL;
    Py_XDECREF(meth);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *fut_finish(FutObject *o, int state, int now)
{
    o->state = state;
    PyObject *cbs = o->cbs;
    if (!cbs)
        Py_RETURN_NONE;
    o->cbs = NULL;
    int direct = 0;
    if (now && aio_current_tasks) {
        PyObject *t = PyDict_GetItemWithError(aio_current_tasks, o->loop); /* borrowed */
        if (!t && PyErr_Occurred()) {
            Py_DECREF(cbs);
            return NULL;
        }
        direct = !t || t == Py_None;
    } else if (now) {
        PyObject *t = PyObject_CallFunctionObjArgs(aio_current_task, o->loop, NULL);
        if (!t) {
            Py_DECREF(cbs);
            return NULL;
        }
        direct = t == Py_None;
        Py_DECREF(t);
    }
    Py_ssize_t n = PyList_Size(cbs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GetItem(cbs, i); /* borrowed */
        PyObject *fn = PyTuple_GetItem(pair, 0), *ctx = PyTuple_GetItem(pair, 1);
        if (direct) {
            PyObject *r = PyObject_CallMethodObjArgs(ctx, s_run, fn, (PyObject *)o, NULL);
            if (!r) {
                /* what a task's wake-up lets through (KeyboardInterrupt,
                   SystemExit): the rest still run, later */
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                for (Py_ssize_t j = i + 1; j < n; j++) {
                    PyObject *p2 = PyList_GetItem(cbs, j);
                    if (fut_call_soon(o, PyTuple_GetItem(p2, 0), PyTuple_GetItem(p2, 1)) != 0)
                        PyErr_Clear();
                }
                PyErr_Restore(et, ev, tb);
                Py_DECREF(cbs);
                return NULL;
            }
            Py_DECREF(r);
        } else if (fut_call_soon(o, fn, ctx) != 0) {
            Py_DECREF(cbs);
            return NULL;
        }
    }
    Py_DECREF(cbs);
    Py_RETURN_NONE;
}

static PyObject *fut_get_loop(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = ((FutObject *)self)->loop;
    Py_INCREF(l);
    return l;
}

static PyObject *fut_done(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(((FutObject *)self)->state != 0);
}

static PyObject *fut_cancelled(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(((FutObject *)self)->state == 2);
}

static PyObject *fut_result(PyObject *self, PyObject *unused)
{
    (void)unused;
    int st = ((FutObject *)self)->state;
    if (st == 1)
        Py_RETURN_NONE;
    if (st == 2)
        PyErr_SetNone(aio_cancelled);
    else
        PyErr_SetString(aio_invalid_state, "result is not set");
    return NULL;
}

static PyObject *fut_add_done_callback(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fn", "context", NULL};
    FutObject *o = (FutObject *)self;
    PyObject *fn = NULL, *ctx = Py_None;
    /* a task's call, add_done_callback(wakeup, context=ctx), once per await:
       taken apart by hand (the general parser costs more than the rest) */
    if (PyTuple_Size(args) == 1 && kw && PyDict_Size(kw) == 1) {
        PyObject *c = PyDict_GetItemWithError(kw, s_context); /* borrowed */
        if (!c && PyErr_Occurred())
            return NULL;
        if (c) {
            fn = PyTuple_GetItem(args, 0);
            ctx = c;
        }
    }
    if (!fn &&
        !PyArg_ParseTupleAndKeywords(args, kw, "O|$O:add_done_callback", kwlist, &fn, &ctx))
        return NULL;
    if (ctx == Py_None)
        ctx = PyObject_CallObject(cv_copy_context, NULL);
    else
        Py_INCREF(ctx);
    if (!ctx)
        return NULL;
    int rc;
    if (o->state) {
        rc = fut_call_soon(o, fn, ctx);
    } else {
        PyObject *pair = PyTuple_Pack(2, fn, ctx);
        rc = -1;
        if (pair) {
            if (!o->cbs)
                o->cbs = PyList_New(0);
            rc = o->cbs ? PyList_Append(o->cbs, pair) : -1;
            Py_DECREF(pair);
        }
    }
    Py_DECREF(ctx);
    if (rc != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *fut_remove_done_callback(PyObject *self, PyObject *fn)
{
    FutObject *o = (FutObject *)self;
    long removed = 0;
    if (o->cbs) {
        for (Py_ssize_t i = PyList_Size(o->cbs) - 1; i >= 0; i--) {
            PyObject *f = PyTuple_GetItem(PyList_GetItem(o->cbs, i), 0);
            int eq = PyObject_RichCompareBool(f, fn, Py_EQ);
            if (eq < 0)
                return NULL;
            if (eq) {
                if (PySequence_DelItem(o->cbs, i) != 0)
                    return NULL;
                removed++;
            }
        }
    }
    return PyLong_FromLong(removed);
}

static PyObject *fut_set_result(PyObject *self, PyObject *args)
{
    FutObject *o = (FutObject *)self;
    PyObject *ignored = Py_None;
    if (!PyArg_ParseTuple(args, "|O:set_result", &ignored))
        return NULL;
    if (o->state) {
        PyErr_SetString(aio_invalid_state, "the future is already done");
        return NULL;
    }
    return fut_finish(o, 1, 0);
}

static PyObject *fut_wake_now(PyObject *self, PyObject *unused)
{
    (void)unused;
    FutObject *o = (FutObject *)self;
    if (o->state)
        Py_RETURN_NONE;
    return fut_finish(o, 1, 1);
}

static PyObject *fut_cancel(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"msg", NULL};
    FutObject *o = (FutObject *)self;
    PyObject *msg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:cancel", kwlist, &msg))
        return NULL;
    if (o->state)
        Py_RETURN_FALSE;
    PyObject *r = fut_finish(o, 2, 0);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_TRUE;
}

static PyObject *fut_exception(PyObject *self, PyObject *unused)
{
    PyObject *r = fut_result(self, unused);
    return r; /* None when done; the same errors as result() otherwise */
}

/* await fut: the future itself is the iterator; it yields itself while
   pending (as asyncio.Future's iterator does) and then ends */
static PyObject *fut_await(PyObject *self)
{
    Py_INCREF(self);
    return self;
}

static PyObject *fut_iternext(PyObject *self)
{
    FutObject *o = (FutObject *)self;
    if (o->state == 0) {
        o->blocking = 1;
        Py_INCREF(self);
        return self;
    }
    if (o->state == 2) {
        PyErr_SetNone(aio_cancelled);
        return NULL;
    }
    return NULL; /* StopIteration(None) */
}

static PyMethodDef fut_methods[] = {
    {"get_loop", fut_get_loop, METH_NOARGS, NULL},
    {"done", fut_done, METH_NOARGS, NULL},
    {"cancelled", fut_cancelled, METH_NOARGS, NULL},
    {"result", fut_result, METH_NOARGS, "None when done; CancelledError when cancelled"},
    {"exception", fut_exception, METH_NOARGS, NULL},
    {"add_done_callback", (PyCFunction)(void (*)(void))fut_add_done_callback,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"remove_done_callback", fut_remove_done_callback, METH_O, NULL},
    {"set_result", fut_set_result, METH_VARARGS, "done; callbacks through loop.call_soon"},
    {"wake_now", fut_wake_now, METH_NOARGS,
     "done (if not yet); the waiter runs now when called from a loop callback"},
    {"cancel", (PyCFunction)(void (*)(void))fut_cancel, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL}};

static PyMemberDef fut_members[] = {
    {"_asyncio_future_blocking", T_BOOL, offsetof(FutObject, blocking), 0, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot fut_slots[] = {
    {Py_tp_new, fut_new},
    {Py_tp_dealloc, fut_dealloc},
    {Py_tp_traverse, fut_traverse},
    {Py_tp_clear, fut_clear},
    {Py_tp_methods, fut_methods},
    {Py_tp_members, fut_members},
    {Py_am_await, fut_await},
    {Py_tp_iter, fut_await},
    {Py_tp_iternext, fut_iternext},
    {Py_tp_doc, "ReplyFuture(loop): the future of one reply (see wake_now)."},
    {0, NULL}};

static PyType_Spec fut_spec = {"hilock._engine.ReplyFuture", sizeof(FutObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, fut_slots};

static PyMethodDef module_methods[] = {
    {"ml_wait_ms", m_ml_wait_ms, METH_VARARGS,
     "ml_wait_ms(redlock, [(rc, ttl_ms, wakeable, line_window_ms)], validity_failed, backoff_ms,"
     " left_ms) -> ms to sleep, -1 until a member's message"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "hilock._engine",
    "libcore's engine for Python drivers that do their own I/O (hilock.aio).", -1,
    module_methods, NULL, NULL, NULL, NULL};

static int add_type(PyObject *m, PyTypeObject **slot, PyType_Spec *spec, const char *name)
{
    *slot = (PyTypeObject *)PyType_FromSpec(spec);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    if (PyModule_AddObject(m, name, (PyObject *)*slot) != 0) {
        Py_DECREF(*slot);
        return -1;
    }
    return 0;
}

/* semaphores, permit-expirable semaphore, count-down latch: their own file */
#include "_engine_sem.c"
/* a plain connection's socket, read and written here (hilock.aio) */
#include "_engine_wire.c"
/* hilock.aio's requests; one-server acquire and release attempts in one call */
#include "_engine_direct.c"
/* the session's hold table: which holds to check (hilock.aio) */
#include "_engine_holds.c"

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *m = PyModule_Create(&engine_module);
    if (!m)
        return NULL;
    if (!names_methods[2].ml_name) {
        names_methods_fill();
        holds_methods_fill();
        sublive_methods_fill();
        unsettled_methods_fill();
        settle_methods_fill();
    }
    if (add_type(m, &ReplyType, &reply_spec, "Reply") ||
        add_type(m, &ReaderType, &reader_spec, "Reader") ||
        add_type(m, &NamesType, &names_spec, "Names") ||
        add_type(m, &AcquireType, &acquire_spec, "Acquire") ||
        add_type(m, &ReleaseType, &release_spec, "Release") ||
        add_type(m, &SettleType, &settle_spec, "Settle") ||
        hb_add_types(m) ||
        add_type(m, &FutType, &fut_spec, "ReplyFuture") ||
        add_type(m, &WireType, &wire_spec, "Wire") ||
        add_type(m, &ReqType, &req_spec, "Req") ||
        add_type(m, &DirectType, &direct_spec, "Direct") ||
        add_type(m, &ConnBaseType, &connbase_spec, "ConnBase") ||
        add_type(m, &ClientBaseType, &clientbase_spec, "ClientBase") ||
        add_type(m, &HoldsType, &holds_spec, "Holds") ||
        add_type(m, &UnsettledType, &unsettled_spec, "Unsettled") ||
        add_type(m, &SubliveType, &sublive_spec, "Sublive") || sem_module_init(m) ||
        hb_add_fns(m))
        goto fail;
    struct { const char *n; long v; } consts[] = {
        {"ACT_SEND", ACT_SEND}, {"ACT_SUBSCRIBE", ACT_SUBSCRIBE}, {"ACT_WAIT", ACT_WAIT},
        {"ACT_UNSUBSCRIBE", ACT_UNSUBSCRIBE}, {"ACT_DONE", ACT_DONE},
        {"PS_OTHER", HL_PS_OTHER}, {"PS_MESSAGE", HL_PS_MESSAGE},
        {"PS_SUBSCRIBE", HL_PS_SUBSCRIBE}, {"PS_UNSUBSCRIBE", HL_PS_UNSUBSCRIBE},
        {"PS_UNHEARD", HL_PS_UNHEARD}, {"SUBLIVE_PING", HL_SUBLIVE_PING},
        {"SUBLIVE_RESET", HL_SUBLIVE_RESET}, {"SUBLIVE_CHECK", HL_SUBLIVE_CHECK},
        {"RENEW_RENEWED", HL_RENEW_RENEWED}, {"RENEW_LOST", HL_RENEW_LOST},
        {"RENEW_EVAL", HL_RENEW_EVAL}, {"RENEW_REDIRECT", HL_RENEW_REDIRECT},
        {"RENEW_TROUBLE", HL_RENEW_TROUBLE},
        {"SETTLE_NOTHING", HL_SETTLE_NOTHING}, {"SETTLE_RELEASED", HL_SETTLE_RELEASED},
        {"SETTLE_LEFT_LINE", HL_SETTLE_LEFT_LINE},
        {"ROUTE_DONE", HL_ROUTE_DONE}, {"ROUTE_MOVED", HL_ROUTE_MOVED},
        {"ROUTE_ASK", HL_ROUTE_ASK}, {"ROUTE_RETRY", HL_ROUTE_RETRY},
        {"ROUTE_REFRESH", HL_ROUTE_REFRESH}, {"ROUTE_FAIL", HL_ROUTE_FAIL},
        {"NSLOTS", HL_SLOTS},
        {"Q_LOCKED", Q_LOCKED}, {"Q_HELD", Q_HELD}, {"Q_HOLDS", Q_HOLDS}, {"Q_TTL", Q_TTL},
        {"Q_TOKEN", Q_TOKEN},
        {"KIND_REENTRANT", HILOCK_KIND_REENTRANT}, {"KIND_FAIR", HILOCK_KIND_FAIR},
        {"KIND_READ", HILOCK_KIND_READ}, {"KIND_WRITE", HILOCK_KIND_WRITE},
        {"KIND_FENCED", HILOCK_KIND_FENCED},
        {"E_INVAL", HILOCK_EINVAL}, {"E_TIMEDOUT", HILOCK_ETIMEDOUT},
        {"E_NOTOWNER", HILOCK_ENOTOWNER}, {"E_LOST", HILOCK_ELOST}, {"E_CONN", HILOCK_ECONN},
        {"E_PROTO", HILOCK_EPROTO}, {"E_AUTH", HILOCK_EAUTH},
        {"E_WRONGTYPE", HILOCK_EWRONGTYPE}, {"E_NOMEM", HILOCK_ENOMEM},
        {"E_CLOSED", HILOCK_ECLOSED}, {"E_TLS", HILOCK_ETLS}, {"E_CANCELED", HILOCK_ECANCELED},
        {"E_UNACKED", HILOCK_EUNACKED},
        {NULL, 0}};
    for (int i = 0; consts[i].n; i++)
        if (PyModule_AddIntConstant(m, consts[i].n, consts[i].v) != 0)
            goto fail;
    if (PyModule_AddObject(m, "MAX_TIME_MS", PyLong_FromLongLong(HILOCK_MAX_TIME_MS)) != 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
