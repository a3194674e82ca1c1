/*
 * hilock._engine, part two: semaphores, the permit-expirable semaphore and
 * the count-down latch (libcore/src/engine/proto_sem.c) for Python drivers that
 * do their own I/O (hilock.aio, through hilock/_aio_sem.py).
 *
 * Not a translation unit of its own: _engine.c includes it (one module,
 * one set of helpers -- Reply, cmd_bytes, raise_code, the Call machine),
 * so the semaphore bindings live in their own file without a second
 * extension module.
 *
 *   SemNames(name, kind, sharded=False)   one object's names (kind
 *                          SEM_SEMAPHORE, SEM_PERMIT or SEM_LATCH; sharded:
 *                          Redis Cluster, SPUBLISH and one slot)
 *     .op(verb, arg=None)  a one-command machine (Call): see sem_op
 *     .wait(permits, wait_ms, lease_ms=0)  the wait machine (SemWait)
 *     .wakes(reply)        how many waiters a pub/sub frame on its channel
 *                          wakes: -1 all, 0 none, n
 *   SemWait                next()/on_reply()/on_error()/on_reply_lost()/
 *                          on_subscribed()/on_wake()/on_resubscribe()/cancel()
 *
 * Every bound is checked here (InvalidArgument before anything is sent);
 * every answer is decoded here, including which answers mean "not owner".
 */

typedef struct {
    PyObject_HEAD
    hl_sem_names n;
    hl_sem_kind kind;
    int ok;
} SemNamesObject;

static PyTypeObject *SemNamesType, *SemWaitType;

static PyObject *semnames_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const char *name;
    Py_ssize_t nlen;
    int kind, sharded = 0;
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, "s#i|p:SemNames", &name, &nlen,
                                                     &kind, &sharded))
        return NULL;
    char why[128];
    if (hl_name_check(name, (size_t)nlen, why, sizeof why)) /* as hilock_semaphore_new */
        return raise_code(HILOCK_EINVAL, why);
    if (kind < HL_SEM_SEMAPHORE || kind > HL_SEM_LATCH) {
        PyErr_Format(PyExc_ValueError, "bad semaphore kind %d", kind);
        return NULL;
    }
    SemNamesObject *o = PyObject_New(SemNamesObject, type);
    if (!o)
        return NULL;
    o->ok = 0;
    o->kind = (hl_sem_kind)kind;
    if (hl_sem_names_init(&o->n, o->kind, name) != 0) {
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    o->ok = 1;
    if (sharded) { /* Redis Cluster: SPUBLISH, and every key in the name's slot */
        o->n.publish = "spublish";
        if (!hl_sem_names_one_slot(&o->n)) {
            Py_DECREF(o);
            PyErr_SetString(PyExc_ValueError, "empty or unclosed hash tag: on a cluster the "
                                              "companion keys would land in another slot");
            return NULL;
        }
    }
    return (PyObject *)o;
}

static void semnames_dealloc(PyObject *self)
{
    SemNamesObject *o = (SemNamesObject *)self;
    if (o->ok)
        hl_sem_names_free(&o->n);
    generic_dealloc_tail(self);
}

static const hl_sem_names *semnames_of(PyObject *self, int *kind)
{
    *kind = (int)((SemNamesObject *)self)->kind;
    return &((SemNamesObject *)self)->n;
}

#define HB_MATTR(py, fn) {py, hb_attr, NULL, NULL, (void *)&hb_sem_fns[HBL_##fn]}
static PyGetSetDef semnames_getset[] = {
    HB_MATTR("slot", f_m_slot), HB_MATTR("name", f_m_name), HB_MATTR("channel", f_m_channel),
    HB_MATTR("kind", f_m_kind), {NULL, NULL, NULL, NULL, NULL}};

static PyObject *semnames_wakes(PyObject *self, PyObject *args)
{
    return hb_invoke(&hb_sem_fns[HBL_f_m_wakes], self, args);
}

/* ---- decoders that also say what an answer means for the caller ---- */

/* permit-expirable release: 1 given back; 0 not taken, -1 its lease had
 * ended: not owner (the value is kept for the message) */
static int decode_pes_release(const redisReply *r, int64_t *out)
{
    int rc = hl_sem_decode_int(r, out);
    if (rc == 0 && *out != 1)
        return HILOCK_ENOTOWNER;
    return rc;
}

/* permit-expirable lease update: 1 renewed, else not owner */
static int decode_pes_update(const redisReply *r, int64_t *out)
{
    int rc = hl_sem_decode_int(r, out);
    if (rc == 0 && *out != 1)
        return HILOCK_ENOTOWNER;
    return rc;
}

static PyObject *sem_invalid(const char *what)
{
    return raise_code(HILOCK_EINVAL, what);
}

/* InvalidArgument raised: 1 */
static int sem_bad(const char *what)
{
    sem_invalid(what);
    return 1;
}

/* Call objects keep a permit id for the command in their owner buffer. */
_Static_assert(HL_OWNER_MAX >= HL_PES_ID_BYTES, "owner buffer too small for a permit id");

/* n.op(verb, arg=None) -> Call (done: result 0 or a code, and the value)
 *   "try_set", n     set the permits (1..2147483647) / the latch's count
 *                    (1..999999999999999) if none: value 1 set, 0 kept
 *   "release", k     semaphore: give back k permits (1..2147483647)
 *   "add", d         semaphore, permit-expirable: add d permits (may be < 0)
 *   "set", n         semaphore: make the free count exactly n (>= 0)
 *   "drain"          semaphore: take every free permit: value how many
 *   "count"          free permits / the latch's count (missing = 0)
 *   "count_down"     latch: count down by one: value the count left
 *   "delete"         delete it and wake its waiters: value 1 deleted, 0 none
 *   "permit_release", id       permit-expirable: give back the permit id
 *                    (32 hex): result ENOTOWNER when it was not taken
 *                    (value 0) or its lease had ended (value -1)
 *   "update_lease", (id, ms)   permit-expirable: a new lease for a taken
 *                    permit: ENOTOWNER when it is not taken any more
 * Bad input raises InvalidArgument before anything is sent. */
static PyObject *semnames_op(PyObject *self, PyObject *args)
{
    SemNamesObject *n = (SemNamesObject *)self;
    const char *verb;
    PyObject *arg = Py_None;
    if (!PyArg_ParseTuple(args, "s|O:op", &verb, &arg))
        return NULL;
    int latch = n->kind == HL_SEM_LATCH, sem = n->kind == HL_SEM_SEMAPHORE,
        pes = n->kind == HL_SEM_PERMIT;
    long long v = 0;
    const char *id = NULL;
    int needs_num = !strcmp(verb, "try_set") || !strcmp(verb, "release") ||
                    !strcmp(verb, "add") || !strcmp(verb, "set");
    if (needs_num) {
        v = PyLong_AsLongLong(arg);
        if (v == -1 && PyErr_Occurred())
            return NULL;
    } else if (!strcmp(verb, "permit_release")) {
        if (!PyArg_Parse(arg, "s", &id))
            return NULL;
    } else if (!strcmp(verb, "update_lease")) {
        if (!PyArg_ParseTuple(arg, "sL", &id, &v))
            return NULL;
    }
    HbObject *obj = hbobj_new(HBC_CALL, self);
    if (!obj)
        return NULL;
    hb_call_st *m = (hb_call_st *)obj->state;
    m->decode = hl_sem_decode_int;
    int bad = 0; /* 1: the error is raised */
    unsigned char *raw = (unsigned char *)m->owner;
    if (!strcmp(verb, "try_set")) {
        if (latch ? hl_sem_check_count(v) : hl_sem_check_permits(v))
            bad = sem_bad(latch ? "a latch count is 1..999999999999999"
                                    : "permits are 1..2147483647");
        else
            hl_sem_cmd_try_set(&m->cmd, n->kind, &n->n, v);
    } else if (!strcmp(verb, "release") && sem) {
        if (hl_sem_check_permits(v))
            bad = sem_bad("permits are 1..2147483647");
        else
            hl_sem_cmd_release(&m->cmd, &n->n, v);
    } else if ((!strcmp(verb, "add") && !latch) || (!strcmp(verb, "set") && sem)) {
        int set = !strcmp(verb, "set");
        if (set ? (v < 0 || v > HL_SEM_COUNT_MAX) : (v < -HL_SEM_COUNT_MAX || v > HL_SEM_COUNT_MAX))
            bad = sem_bad(set ? "permits are 0..999999999999999"
                                  : "the change is -999999999999999..999999999999999");
        else
            hl_sem_cmd_add(&m->cmd, &n->n, v, set);
    } else if (!strcmp(verb, "drain") && sem) {
        hl_sem_cmd_drain(&m->cmd, &n->n);
    } else if (!strcmp(verb, "count")) {
        hl_sem_cmd_count(&m->cmd, n->kind, &n->n);
        m->decode = hl_sem_decode_count;
    } else if (!strcmp(verb, "count_down") && latch) {
        hl_latch_cmd_count_down(&m->cmd, &n->n);
    } else if (!strcmp(verb, "delete")) {
        hl_sem_cmd_delete(&m->cmd, n->kind, &n->n);
    } else if (!strcmp(verb, "permit_release") && pes) {
        if (hl_pes_id_parse(raw, id) != 0)
            bad = sem_bad("a permit id is 32 hex characters");
        else {
            hl_pes_cmd_release(&m->cmd, &n->n, raw);
            m->decode = decode_pes_release;
        }
    } else if (!strcmp(verb, "update_lease") && pes) {
        if (hl_pes_id_parse(raw, id) != 0)
            bad = sem_bad("a permit id is 32 hex characters");
        else if (v <= 0 || hl_check_lease(v))
            bad = sem_bad("a permit's lease is > 0 ms");
        else {
            hl_pes_cmd_update(&m->cmd, &n->n, raw, v);
            m->decode = decode_pes_update;
        }
    } else {
        PyErr_Format(PyExc_ValueError, "no operation %s for this kind", verb);
        bad = 1;
    }
    if (bad) {
        Py_DECREF(obj);
        return NULL;
    }
    obj->live = 1;
    return (PyObject *)obj;
}

/* ---- the wait machine ---- */

typedef struct {
    PyObject_HEAD
    hl_semwait m;
    PyObject *names; /* the machine borrows the names */
    int resent;
    unsigned char ids[HL_PES_ID_BYTES];
} SemWaitObject;

/* n.wait(permits, wait_ms, lease_ms=0, owner=None, latch_epoch=-1,
 *        latch_seq=0, latch_ttl_ms=0) -> SemWait: take permits
 * (semaphore), one permit with its own lease (permit-expirable; lease_ms 0:
 * until released; permits must be 1) or wait for the latch to open
 * (permits ignored). wait_ms: -1 forever, 0 one try.
 * Semaphore, latch_epoch >= 0: every try of this call is idempotent under
 * the owner's request latch (hl_sem_latch_arg: epoch = the client's count
 * of attempts whose reply was lost, seq unique per call), and a try whose
 * reply was lost (on_reply_lost) is settled before the machine ends. */
static PyObject *semnames_wait(PyObject *self, PyObject *args)
{
    SemNamesObject *n = (SemNamesObject *)self;
    long long permits, wait, lease = 0, epoch = -1, seq = 0, latch_ttl = 0;
    const char *owner = NULL;
    if (!PyArg_ParseTuple(args, "LL|LzLLL:wait", &permits, &wait, &lease, &owner, &epoch, &seq,
                          &latch_ttl))
        return NULL;
    if (epoch >= 0 && n->kind == HL_SEM_SEMAPHORE &&
        (!owner || !check_owner(owner) || check_range(seq, 0, INT64_MAX, "latch_seq") ||
         check_range(latch_ttl, 1, HILOCK_MAX_TIME_MS, "latch_ttl_ms")))
        return PyErr_Occurred() ? NULL : sem_invalid("a request latch needs an owner");
    if (n->kind == HL_SEM_LATCH)
        permits = 1;
    if (hl_sem_check_permits(permits) || (n->kind == HL_SEM_PERMIT && permits != 1))
        return sem_invalid(n->kind == HL_SEM_PERMIT ? "one permit per permit-expirable acquire"
                                                    : "permits are 1..2147483647");
    if (hl_check_wait(wait))
        return sem_invalid("wait is -1 (forever), 0 (one try) or a positive ms count");
    if (lease < 0 || hl_check_lease(lease))
        return sem_invalid("a permit's lease is 0 (until released) or a positive ms count");
    SemWaitObject *o = PyObject_New(SemWaitObject, SemWaitType);
    if (!o)
        return NULL;
    memset(&o->m, 0, sizeof o->m); /* dealloc frees m.latch on every path */
    Py_INCREF(self);
    o->names = self;
    o->resent = 0;
    memset(o->ids, 0, sizeof o->ids);
    if (n->kind == HL_SEM_PERMIT) {
        /* 16 random bytes, as Redisson's generateId: a uuid4's hex digits */
        char u[HL_UUID_LEN + 1], hex[2 * HL_PES_ID_BYTES + 1];
        size_t k = 0;
        if (hl_uuid4(u) != 0) {
            Py_DECREF(o);
            return raise_code(HILOCK_EPROTO, "no random bytes for a permit id");
        }
        for (const char *c = u; *c && k < sizeof hex - 1; c++)
            if (*c != '-')
                hex[k++] = *c;
        hex[k] = 0;
        if (hl_pes_id_parse(o->ids, hex) != 0) {
            Py_DECREF(o);
            return raise_code(HILOCK_EPROTO, "bad permit id");
        }
    }
    if (hl_semwait_init(&o->m, n->kind, &n->n, permits, lease, o->ids, wait, hb_mono_ms()) != 0) {
        Py_DECREF(o);
        return sem_invalid("bad permits, wait or lease");
    }
    if (epoch >= 0 && n->kind == HL_SEM_SEMAPHORE) {
        size_t len = strlen(n->n.latch_prefix) + strlen(owner) + 48;
        char *latch = malloc(len);
        if (!latch) {
            Py_DECREF(o);
            return PyErr_NoMemory();
        }
        int rc = hl_sem_latch_arg(latch, len, &n->n, owner, (uint64_t)epoch, (uint64_t)seq);
        if (rc == 0)
            rc = hl_semwait_set_latch(&o->m, latch, latch_ttl);
        free(latch);
        if (rc) {
            Py_DECREF(o);
            return raise_code(rc, "request latch");
        }
    }
    return (PyObject *)o;
}

static void semwait_dealloc(PyObject *self)
{
    hl_semwait_free(&((SemWaitObject *)self)->m);
    Py_XDECREF(((SemWaitObject *)self)->names);
    generic_dealloc_tail(self);
}

/* w.next() ->
 *   (ACT_SEND, bytes)               send, read one reply, w.on_reply(reply)
 *   (ACT_SUBSCRIBE, channel)        subscribe, then w.on_subscribed(ok)
 *   (ACT_WAIT, channel, sleep_ms)   wait for a wake-up (-1: no limit), w.on_wake()
 *   (ACT_UNSUBSCRIBE, channel)      drop the subscription
 *   (ACT_DONE, result, permit_id or None, count)
 *                                   result 0: taken / open; permit_id: the
 *                                   permit-expirable permit's 32 hex chars;
 *                                   count: a latch's count last seen */
static PyObject *semwait_next(PyObject *self, PyObject *unused)
{
    (void)unused;
    SemWaitObject *o = (SemWaitObject *)self;
    switch (hl_semwait_next(&o->m, hb_mono_ms())) {
    case HL_ACT_SEND: {
        o->resent = 0;
        PyObject *b = cmd_bytes(&o->m.cmd, 0);
        if (!b)
            return NULL;
        return Py_BuildValue("(iN)", ACT_SEND, b);
    }
    case HL_ACT_SUBSCRIBE:
        return Py_BuildValue("(iN)", ACT_SUBSCRIBE, channel_str(o->m.channel));
    case HL_ACT_WAIT:
        return Py_BuildValue("(iNL)", ACT_WAIT, channel_str(o->m.channel),
                             (long long)o->m.sleep_ms);
    case HL_ACT_UNSUBSCRIBE:
        return Py_BuildValue("(iN)", ACT_UNSUBSCRIBE, channel_str(o->m.channel));
    case HL_ACT_DONE:
    default:
        if (o->m.result == 0 && o->m.kind == HL_SEM_PERMIT) {
            char hex[2 * HL_PES_ID_BYTES + 1];
            hl_pes_id_hex(hex, o->ids);
            return Py_BuildValue("(iisL)", ACT_DONE, o->m.result, hex, (long long)o->m.count);
        }
        return Py_BuildValue("(iiOL)", ACT_DONE, o->m.result, Py_None, (long long)o->m.count);
    }
}

/* w.on_reply(reply) -> None, or bytes to send again (the script's body
 * after NOSCRIPT; feed that reply to on_reply too) */
static PyObject *semwait_on_reply(PyObject *self, PyObject *arg)
{
    SemWaitObject *o = (SemWaitObject *)self;
    redisReply *r = get_reply(arg);
    if (!r)
        return NULL;
    if (hl_reply_is_noscript(r) && o->m.cmd.script >= 0 && !o->resent) {
        o->resent = 1;
        return cmd_bytes(&o->m.cmd, 1);
    }
    hl_semwait_on_reply(&o->m, r, hb_mono_ms());
    Py_RETURN_NONE;
}

/* w.on_error(code): the command was not sent, or failed without a reply
 * the server may have acted on */
static PyObject *semwait_on_error(PyObject *self, PyObject *arg)
{
    int code;
    if (arg_code(arg, &code))
        return NULL;
    hl_semwait_on_error(&((SemWaitObject *)self)->m, code, hb_mono_ms());
    Py_RETURN_NONE;
}

/* w.on_reply_lost(code): sent, and no reply came (the connection died or
 * timed out): the server may have run it (a permit-expirable acquire is
 * then settled: its id given back before the machine ends) */
static PyObject *semwait_on_reply_lost(PyObject *self, PyObject *arg)
{
    int code;
    if (arg_code(arg, &code))
        return NULL;
    SemWaitObject *o = (SemWaitObject *)self;
    o->m.cmd.reply_lost = 1;
    hl_semwait_on_error(&o->m, code, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *semwait_on_subscribed(PyObject *self, PyObject *arg)
{
    int ok = PyObject_IsTrue(arg);
    if (ok < 0)
        return NULL;
    hl_semwait_on_subscribed(&((SemWaitObject *)self)->m, ok, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *semwait_on_wake(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_semwait_on_wake(&((SemWaitObject *)self)->m, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyObject *semwait_on_resubscribe(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_semwait_on_resubscribe(&((SemWaitObject *)self)->m, hb_mono_ms());
    Py_RETURN_NONE;
}

/* w.cancel(): between actions, end with E_CANCELED (a permit-expirable
 * acquire being settled finishes that first) */
static PyObject *semwait_cancel(PyObject *self, PyObject *unused)
{
    (void)unused;
    hl_semwait_cancel(&((SemWaitObject *)self)->m, hb_mono_ms());
    Py_RETURN_NONE;
}

static PyMethodDef semnames_methods[] = {
    {"op", semnames_op, METH_VARARGS, "op(verb, arg=None) -> Call"},
    {"wait", semnames_wait, METH_VARARGS,
     "wait(permits, wait_ms, lease_ms=0, owner=None, latch_epoch=-1, latch_seq=0, "
     "latch_ttl_ms=0) -> SemWait"},
    {"wakes", semnames_wakes, METH_VARARGS, "wakes(reply) -> -1 all, 0 none, n waiters"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot semnames_slots[] = {
    {Py_tp_new, semnames_new},
    {Py_tp_dealloc, semnames_dealloc},
    {Py_tp_methods, semnames_methods},
    {Py_tp_getset, semnames_getset},
    {Py_tp_doc, "SemNames(name, kind): a semaphore's, permit-expirable semaphore's or "
                "count-down latch's names (Redisson's layouts)."},
    {0, NULL}};

static PyType_Spec semnames_spec = {"hilock._engine.SemNames", sizeof(SemNamesObject), 0,
                                    Py_TPFLAGS_DEFAULT, semnames_slots};

static PyMethodDef semwait_methods[] = {
    {"next", semwait_next, METH_NOARGS, "next() -> (ACT_*, ...)"},
    {"on_reply", semwait_on_reply, METH_O, "on_reply(reply) -> None or bytes to resend"},
    {"on_error", semwait_on_error, METH_O, "on_error(code)"},
    {"on_reply_lost", semwait_on_reply_lost, METH_O, "on_reply_lost(code)"},
    {"on_subscribed", semwait_on_subscribed, METH_O, "on_subscribed(ok)"},
    {"on_wake", semwait_on_wake, METH_NOARGS, "on_wake()"},
    {"on_resubscribe", semwait_on_resubscribe, METH_NOARGS, "on_resubscribe()"},
    {"cancel", semwait_cancel, METH_NOARGS, "cancel()"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot semwait_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, semwait_dealloc},
    {Py_tp_methods, semwait_methods},
    {Py_tp_doc, "The wait machine of a semaphore acquire, permit-expirable acquire or latch "
                "await (SemNames.wait)."},
    {0, NULL}};

static PyType_Spec semwait_spec = {"hilock._engine.SemWait", sizeof(SemWaitObject), 0,
                                   Py_TPFLAGS_DEFAULT, semwait_slots};

/* Called from PyInit__engine: the types and constants of this file. */
static int sem_module_init(PyObject *m)
{
    if (add_type(m, &SemNamesType, &semnames_spec, "SemNames") ||
        add_type(m, &SemWaitType, &semwait_spec, "SemWait"))
        return -1;
    if (PyModule_AddIntConstant(m, "SEM_SEMAPHORE", HL_SEM_SEMAPHORE) ||
        PyModule_AddIntConstant(m, "SEM_PERMIT", HL_SEM_PERMIT) ||
        PyModule_AddIntConstant(m, "SEM_LATCH", HL_SEM_LATCH))
        return -1;
    return 0;
}
