/*
 * hilock._engine.Req and hilock._engine.Direct: hilock.aio's requests, and
 * the one-server acquire and release attempt made in one call each.
 * Included by _engine.c (it uses the machines, ReplyFuture and Wire).
 *
 * Req(conn, fut): one command on a hilock.aio connection -- its connection,
 * the ReplyFuture its waiter awaits, the reply (or None), whether the
 * connection failed under it, the loop time after which its waiter gives up
 * (0: nobody waits). A C object because a Python one costs a frame per
 * command to build; its fields are what aio.py's class had.
 *
 * Direct(client, pool, loop, window_ms, latch_ttl_ms, command_timeout_ms,
 *        watchdog_lease_ms, client_id, pid_box, mono): a client on ONE server
 * (no cluster, sentinel or replica acknowledgement). Its acquire() and
 * release() do in C what aio.py's driver did in Python around the engine's
 * machines for the first command of a call: take an idle connection of the
 * pool (one that is open, of the current master generation, with a
 * transport), make the machine (an acquire's latch sequence and a
 * release's request id -- the owner's unlock latch, release_request_id --
 * drawn from the client's counters as aio.py draws them), take its first action (always a send), write the command (straight
 * to the Wire's send(2) on a plain connection), queue the Req and arm the
 * connection's timer for the command timeout. The caller awaits req.fut,
 * then calls done(m, req): a reply that is not an error is fed to the
 * machine, the connection goes back to the pool and the machine's next
 * action is returned; anything else (an
 * error reply, which the router must see; no reply in time; the connection
 * closed) is left for aio.py's general path, which takes the machine, the
 * request and the action over exactly where they stand. No decision is
 * made here: the machines decide, as they do for every driver.
 */

/* ReqObject and ReqType are declared in _engine_wire.c (its reader fills them) */

static PyObject *req_make(PyObject *conn, PyObject *fut)
{
    allocfunc alloc = (allocfunc)PyType_GetSlot(ReqType, Py_tp_alloc);
    ReqObject *o = (ReqObject *)alloc(ReqType, 0);
    if (!o)
        return NULL;
    Py_INCREF(conn);
    o->conn = conn;
    Py_INCREF(fut);
    o->fut = fut;
    Py_INCREF(Py_None);
    o->reply = Py_None;
    o->failed = 0;
    o->deadline = 0.0;
    return (PyObject *)o;
}

/* Req(conn, fut) */
static PyObject *req_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)type;
    PyObject *conn, *fut;
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, "OO:Req", &conn, &fut)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Req() takes no keyword arguments");
        return NULL;
    }
    return req_make(conn, fut);
}

static int req_traverse(PyObject *self, visitproc visit, void *arg)
{
    ReqObject *o = (ReqObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->conn);
    Py_VISIT(o->fut);
    Py_VISIT(o->reply);
    return 0;
}

static int req_clear(PyObject *self)
{
    ReqObject *o = (ReqObject *)self;
    Py_CLEAR(o->conn);
    Py_CLEAR(o->fut);
    Py_CLEAR(o->reply);
    return 0;
}

static void req_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    req_clear(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

static PyMemberDef req_members[] = {
    {"conn", T_OBJECT, offsetof(ReqObject, conn), 0, "its connection"},
    {"fut", T_OBJECT, offsetof(ReqObject, fut), 0, "the ReplyFuture its waiter awaits"},
    {"reply", T_OBJECT, offsetof(ReqObject, reply), 0, "the reply, or None"},
    {"failed", T_BOOL, offsetof(ReqObject, failed), 0, "the connection closed under it"},
    {"deadline", T_DOUBLE, offsetof(ReqObject, deadline), 0,
     "loop time after which its waiter gives up (0: nobody waits)"},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot req_slots[] = {
    {Py_tp_new, req_new},
    {Py_tp_dealloc, req_dealloc},
    {Py_tp_traverse, req_traverse},
    {Py_tp_clear, req_clear},
    {Py_tp_members, req_members},
    {Py_tp_doc, "Req(conn, fut): one command on a hilock.aio connection (see "
                "python/_engine_direct.c)."},
    {0, NULL}};

static PyType_Spec req_spec = {"hilock._engine.Req", sizeof(ReqObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, req_slots};

/* ------------------------------------------------------------------ */

/* ConnBase: the fields of a hilock.aio connection (_Conn subclasses it)
 * that Direct reads and writes on every command, kept in C so that it need
 * not look them up by name: transport (its Wire or asyncio transport, None
 * before it is made), pending (the deque of its requests), timer (its
 * TimerHandle or None), timer_at (when that fires), gen (the client's
 * master generation it was opened in), closed, broken (a reply timed out:
 * never reused). Python sees them as plain attributes. */
typedef struct {
    PyObject_HEAD
    PyObject *transport, *pending, *timer;
    double timer_at;
    long long gen;
    char closed, broken;
} ConnBaseObject;

static PyTypeObject *ConnBaseType;

static int connbase_traverse(PyObject *self, visitproc visit, void *arg)
{
    ConnBaseObject *o = (ConnBaseObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->transport);
    Py_VISIT(o->pending);
    Py_VISIT(o->timer);
    return 0;
}

static int connbase_clear(PyObject *self)
{
    ConnBaseObject *o = (ConnBaseObject *)self;
    Py_CLEAR(o->transport);
    Py_CLEAR(o->pending);
    Py_CLEAR(o->timer);
    return 0;
}

static void connbase_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    connbase_clear(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

static PyMemberDef connbase_members[] = {
    {"transport", T_OBJECT, offsetof(ConnBaseObject, transport), 0, "its Wire or transport"},
    {"pending", T_OBJECT, offsetof(ConnBaseObject, pending), 0, "its requests, oldest first"},
    {"timer", T_OBJECT, offsetof(ConnBaseObject, timer), 0, "its timer handle, or None"},
    {"timer_at", T_DOUBLE, offsetof(ConnBaseObject, timer_at), 0, "when its timer fires"},
    {"gen", T_LONGLONG, offsetof(ConnBaseObject, gen), 0, "the master generation it serves"},
    {"closed", T_BOOL, offsetof(ConnBaseObject, closed), 0, "closed"},
    {"broken", T_BOOL, offsetof(ConnBaseObject, broken), 0, "a reply timed out: never reused"},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot connbase_slots[] = {
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, connbase_dealloc},
    {Py_tp_traverse, connbase_traverse},
    {Py_tp_clear, connbase_clear},
    {Py_tp_members, connbase_members},
    {Py_tp_doc, "ConnBase: the per-command fields of a hilock.aio connection (see "
                "python/_engine_direct.c)."},
    {0, NULL}};

static PyType_Spec connbase_spec = {
    "hilock._engine.ConnBase", sizeof(ConnBaseObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, connbase_slots};

/* ClientBase: the counters of a hilock.aio client (Client subclasses it)
 * that Direct reads and moves on every call: _gen (the master generation;
 * older connections are dropped), _seq (unique per call), _latch_epoch
 * (moved on after every lost reply), _closed. Python sees plain attributes. */
typedef struct {
    PyObject_HEAD
    long long gen, seq, latch_epoch;
    char closed;
} ClientBaseObject;

static PyTypeObject *ClientBaseType;

static void clientbase_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

static int clientbase_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyMemberDef clientbase_members[] = {
    {"_gen", T_LONGLONG, offsetof(ClientBaseObject, gen), 0, "master generation"},
    {"_seq", T_LONGLONG, offsetof(ClientBaseObject, seq), 0, "calls made (unique ids)"},
    {"_latch_epoch", T_LONGLONG, offsetof(ClientBaseObject, latch_epoch), 0,
     "lost replies so far (latch keys move on)"},
    {"_closed", T_BOOL, offsetof(ClientBaseObject, closed), 0, "closed"},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot clientbase_slots[] = {
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, clientbase_dealloc},
    {Py_tp_traverse, clientbase_traverse},
    {Py_tp_members, clientbase_members},
    {Py_tp_doc, "ClientBase: the per-call counters of a hilock.aio client (see "
                "python/_engine_direct.c)."},
    {0, NULL}};

static PyType_Spec clientbase_spec = {
    "hilock._engine.ClientBase", sizeof(ClientBaseObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, clientbase_slots};

/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *client;
    PyObject *pool;
    PyObject *loop;
    PyObject *idle;    /* pool.idle (a list) */
    PyObject *waiting; /* pool.waiting (a deque) */
    PyObject *pid_box; /* a list whose item 0 is the process id (fork-updated by aio.py) */
    long long window_ms, latch_ttl_ms, cmd_ms, wd_ms;
    int mono; /* the loop's time() is time.monotonic(): read CLOCK_MONOTONIC here */
    char id[64];
} DirectObject;

static PyTypeObject *DirectType;
static PyObject *s_append,
    *s_close, *s_arm, *s_time, *s_put, *s_write, *s_idle,
    *s_waiting;

static int direct_strings(void)
{
    if (s_waiting)
        return 0;
    struct {
        PyObject **p;
        const char *s;
    } t[] = {{&s_append, "append"}, {&s_close, "close"},
             {&s_arm, "arm"},         {&s_time, "time"},       {&s_put, "put"},
             {&s_write, "write"},     {&s_idle, "idle"},       {&s_waiting, "waiting"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!*t[i].p && !(*t[i].p = PyUnicode_InternFromString(t[i].s)))
            return -1;
    return 0;
}

/* Direct(client, pool, loop, window_ms, latch_ttl_ms, command_timeout_ms,
 *        watchdog_lease_ms, client_id, pid_box, mono=False) */
static PyObject *direct_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *client, *pool, *loop, *pid_box;
    long long window, latch_ttl, cmdt, wd;
    const char *id;
    int mono = 0;
    if ((kw && PyDict_Size(kw)) ||
        !PyArg_ParseTuple(args, "OOOLLLLsO!|p:Direct", &client, &pool, &loop, &window,
                          &latch_ttl, &cmdt, &wd, &id, &PyList_Type, &pid_box, &mono)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Direct() takes no keyword arguments");
        return NULL;
    }
    if (check_range(window, 1, HILOCK_MAX_TIME_MS, "window_ms") ||
        check_range(latch_ttl, 1, HILOCK_MAX_TIME_MS, "latch_ttl_ms") ||
        check_range(cmdt, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms") ||
        check_range(wd, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms") ||
        !check_str(id, 63, "client id"))
        return NULL;
    if (!PyObject_TypeCheck(client, ClientBaseType)) {
        PyErr_SetString(PyExc_TypeError, "Direct: client must be a hilock._engine.ClientBase");
        return NULL;
    }
    if (direct_strings() != 0 || fut_imports() != 0)
        return NULL;
    PyObject *idle = PyObject_GetAttr(pool, s_idle);
    PyObject *waiting = idle ? PyObject_GetAttr(pool, s_waiting) : NULL;
    if (!waiting || !PyList_Check(idle)) {
        if (waiting)
            PyErr_SetString(PyExc_TypeError, "Direct: pool.idle must be a list");
        Py_XDECREF(idle);
        Py_XDECREF(waiting);
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    DirectObject *o = (DirectObject *)alloc(type, 0);
    if (!o) {
        Py_DECREF(idle);
        Py_DECREF(waiting);
        return NULL;
    }
    Py_INCREF(client);
    o->client = client;
    Py_INCREF(pool);
    o->pool = pool;
    Py_INCREF(loop);
    o->loop = loop;
    o->idle = idle;
    o->waiting = waiting;
    Py_INCREF(pid_box);
    o->pid_box = pid_box;
    o->window_ms = window;
    o->latch_ttl_ms = latch_ttl;
    o->cmd_ms = cmdt;
    o->wd_ms = wd;
    o->mono = mono;
    snprintf(o->id, sizeof o->id, "%s", id);
    return (PyObject *)o;
}

static int direct_traverse(PyObject *self, visitproc visit, void *arg)
{
    DirectObject *o = (DirectObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->client);
    Py_VISIT(o->pool);
    Py_VISIT(o->loop);
    Py_VISIT(o->idle);
    Py_VISIT(o->waiting);
    Py_VISIT(o->pid_box);
    return 0;
}

static int direct_clear(PyObject *self)
{
    DirectObject *o = (DirectObject *)self;
    Py_CLEAR(o->client);
    Py_CLEAR(o->pool);
    Py_CLEAR(o->loop);
    Py_CLEAR(o->idle);
    Py_CLEAR(o->waiting);
    Py_CLEAR(o->pid_box);
    return 0;
}

static void direct_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    direct_clear(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

static PyObject *call0(PyObject *obj, PyObject *name)
{
    return PyObject_CallMethodObjArgs(obj, name, NULL);
}

/* An idle connection ready for a command (a new reference, *transport set
 * to its transport, borrowed from it), NULL without an exception when there
 * is none (the caller takes the general path: it opens or waits for one).
 * What is closed or of an older master generation is closed and dropped,
 * as _Pool.get_nowait does. */
static PyObject *direct_take(DirectObject *o, PyObject **transport)
{
    long long gen = ((ClientBaseObject *)o->client)->gen;
    Py_ssize_t n;
    while ((n = PyList_Size(o->idle)) > 0) {
        PyObject *conn = PyList_GetItem(o->idle, n - 1);
        if (!conn)
            return NULL;
        Py_INCREF(conn);
        if (PyList_SetSlice(o->idle, n - 1, n, NULL) != 0) {
            Py_DECREF(conn);
            return NULL;
        }
        if (!PyObject_TypeCheck(conn, ConnBaseType)) { /* not one of ours: the general path */
            int rc = PyList_Append(o->idle, conn);
            Py_DECREF(conn);
            (void)rc; /* an append that failed left its error set */
            return NULL;
        }
        ConnBaseObject *cb = (ConnBaseObject *)conn;
        PyObject *tr = cb->transport;
        if (!cb->closed && cb->gen == gen && tr && tr != Py_None) {
            *transport = tr; /* the connection keeps it */
            return conn;
        }
        PyObject *r = call0(conn, s_close);
        Py_DECREF(conn);
        if (!r)
            return NULL;
        Py_DECREF(r);
    }
    return NULL;
}

/* Send cmd on conn as a new request waited for up to timeout_ms: the Req,
 * queued, its future fresh, its deadline set and the connection's timer
 * armed by then (what _send_idle and _Cancel.req do). On a Wire the RESP
 * goes from a buffer here straight to send(2); other transports get bytes. */
static PyObject *direct_send(DirectObject *o, PyObject *conn, PyObject *tr, hl_cmd *cmd,
                             long long timeout_ms)
{
    PyObject *fut = fut_make(FutType, o->loop);
    PyObject *req = fut ? req_make(conn, fut) : NULL;
    Py_XDECREF(fut);
    if (!req)
        return NULL;
    ConnBaseObject *cb = (ConnBaseObject *)conn;
    PyObject *r = cb->pending ? PyObject_CallMethodObjArgs(cb->pending, s_append, req, NULL)
                              : (PyErr_SetString(PyExc_AttributeError, "connection has no queue"),
                                 NULL);
    if (!r)
        goto fail;
    Py_DECREF(r);
    if (Py_TYPE(tr) == WireType) {
        size_t n = hl_resp_len(cmd->argc, cmd->argvlen);
        char stack[4096];
        char *buf = n <= sizeof stack ? stack : malloc(n);
        if (!buf) {
            PyErr_NoMemory();
            goto fail;
        }
        hl_resp_write(buf, cmd->argc, cmd->argv, cmd->argvlen);
        r = wire_send((WireObject *)tr, buf, (Py_ssize_t)n);
        if (buf != stack)
            free(buf);
    } else {
        PyObject *data = cmd_bytes(cmd, 0);
        r = data ? PyObject_CallMethodObjArgs(tr, s_write, data, NULL) : NULL;
        Py_XDECREF(data);
    }
    if (!r)
        goto fail;
    Py_DECREF(r);
    double t;
    struct timespec ts;
    if (o->mono && clock_gettime(CLOCK_MONOTONIC, &ts) == 0) {
        t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    } else {
        PyObject *now = call0(o->loop, s_time);
        t = now ? PyFloat_AsDouble(now) : -1.0;
        Py_XDECREF(now);
        if (t == -1.0 && PyErr_Occurred())
            goto fail;
    }
    double deadline = t + (double)timeout_ms / 1000.0;
    ((ReqObject *)req)->deadline = deadline;
    if (!cb->timer || cb->timer == Py_None || deadline < cb->timer_at) {
        PyObject *d = PyFloat_FromDouble(deadline);
        r = d ? PyObject_CallMethodObjArgs(conn, s_arm, d, NULL) : NULL;
        Py_XDECREF(d);
        if (!r)
            goto fail;
        Py_DECREF(r);
    }
    return req;
fail:
    Py_DECREF(req);
    return NULL;
}

/* (m, req) for a machine whose first command, cmd, was sent on an idle
 * connection, or None when no connection is idle (nothing sent). */
static PyObject *direct_start(DirectObject *o, PyObject *m, hl_cmd *cmd, long long timeout_ms)
{
    PyObject *tr = NULL;
    PyObject *conn = direct_take(o, &tr);
    if (!conn) {
        Py_DECREF(m);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *req = direct_send(o, conn, tr, cmd, timeout_ms);
    Py_DECREF(conn);
    if (!req) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *res = PyTuple_Pack(2, m, req);
    Py_DECREF(m);
    Py_DECREF(req);
    return res;
}

/* the client's _seq + 1 (aio.py's _new_acquire and _release_id) */
static long long direct_seq(DirectObject *o)
{
    return ++((ClientBaseObject *)o->client)->seq;
}

/* d.acquire(names, owner, wait_ms, lease_ms) -> (m, req) | None: an
 * acquire machine made as aio.py's _new_acquire makes it, its first attempt
 * sent as req (m.sent() is the action, what m.next() returned for it) */
static PyObject *direct_acquire(PyObject *self, PyObject *args)
{
    DirectObject *o = (DirectObject *)self;
    PyObject *names;
    const char *owner;
    long long wait, lease;
    if (!PyArg_ParseTuple(args, "O!sLL:acquire", NamesType, &names, &owner, &wait, &lease))
        return NULL;
    long long seq = direct_seq(o), epoch = ((ClientBaseObject *)o->client)->latch_epoch;
    PyObject *m = acquire_make(names, owner, wait, lease, o->window_ms, epoch, seq,
                               o->latch_ttl_ms, 0);
    if (!m)
        return NULL;
    AcquireObject *a = (AcquireObject *)m;
    if (hl_acquire_next(&a->a, hb_mono_ms()) != HL_ACT_SEND) {
        /* an acquire starts with a send: anything else is the general path's */
        Py_DECREF(m);
        Py_RETURN_NONE;
    }
    a->resent = 0;
    return direct_start(o, m, &a->a.cmd, o->cmd_ms);
}

/* d.release(names, owner, acquired_lease_ms) -> (m, req) | None: a
 * release machine made as aio.py's _release makes it (the owner's unlock
 * latch), its first command sent as req (m.sent() is the action) */
static PyObject *direct_release(PyObject *self, PyObject *args)
{
    DirectObject *o = (DirectObject *)self;
    PyObject *names;
    const char *owner;
    long long lease;
    if (!PyArg_ParseTuple(args, "O!sL:release", NamesType, &names, &owner, &lease))
        return NULL;
    long long seq = direct_seq(o), epoch = ((ClientBaseObject *)o->client)->latch_epoch;
    PyObject *p = PyList_Size(o->pid_box) > 0 ? PyList_GetItem(o->pid_box, 0) : NULL;
    long long pid = p ? PyLong_AsLongLong(p) : -1;
    if (pid == -1 && PyErr_Occurred())
        return NULL;
    char rid[128];
    if (release_rid(rid, sizeof rid, o->id, pid, epoch, seq) != 0)
        return NULL;
    PyObject *m = release_make(names, owner, lease, o->wd_ms, rid, o->cmd_ms, 0);
    if (!m)
        return NULL;
    ReleaseObject *r = (ReleaseObject *)m;
    if (hl_release_next(&r->m, hb_mono_ms()) != HL_ACT_SEND) {
        Py_DECREF(m); /* a release starts with a send: else the general path */
        Py_RETURN_NONE;
    }
    long long t = r->m.timeout_ms;
    return direct_start(o, m, &r->m.cmd, t > 0 ? t : o->cmd_ms);
}

/* conn back to the pool: straight onto the idle list when it is clean and
 * nobody waits for a connection, else through pool.put (which decides) */
static int direct_give_back(DirectObject *o, PyObject *conn)
{
    int plain = PyObject_Length(o->waiting) == 0;
    if (plain) {
        ConnBaseObject *cb = (ConnBaseObject *)conn; /* direct_take took only these */
        Py_ssize_t np = cb->pending ? PyObject_Length(cb->pending) : -1;
        if (np < 0)
            return -1;
        ClientBaseObject *cl = (ClientBaseObject *)o->client;
        plain = np == 0 && !cb->closed && !cb->broken && !cl->closed && cl->gen == cb->gen;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    if (plain)
        return PyList_Append(o->idle, conn);
    PyObject *r = PyObject_CallMethodObjArgs(o->pool, s_put, conn, NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* d.done(m, req) -> action | None: req's reply, when it came and is not an
 * error, fed to m (an Acquire or a Release), req's connection given back,
 * and m's next action returned (what m.next() returns). Otherwise (no
 * reply, an error reply for the router) nothing is done: None. */
static PyObject *direct_done(PyObject *self, PyObject *args)
{
    DirectObject *o = (DirectObject *)self;
    PyObject *mach, *rq;
    if (!PyArg_ParseTuple(args, "OO!:done", &mach, ReqType, &rq))
        return NULL;
    ReqObject *req = (ReqObject *)rq;
    PyObject *reply = req->reply;
    int acq = Py_TYPE(mach) == AcquireType;
    if (!acq && Py_TYPE(mach) != ReleaseType) {
        PyErr_SetString(PyExc_TypeError, "done: expected an Acquire or a Release machine");
        return NULL;
    }
    if (reply == Py_None || Py_TYPE(reply) != ReplyType)
        Py_RETURN_NONE;
    redisReply *r = ((ReplyObject *)reply)->r;
    if (r->type == REDIS_REPLY_ERROR)
        Py_RETURN_NONE;
    if (acq)
        hl_acquire_on_reply(&((AcquireObject *)mach)->a, r, hb_mono_ms());
    else
        hl_release_on_reply(&((ReleaseObject *)mach)->m, r, hb_mono_ms());
    if (direct_give_back(o, req->conn) != 0)
        return NULL;
    return acq ? acquire_next(mach, NULL) : release_next(mach, NULL);
}

static PyMethodDef direct_methods[] = {
    {"acquire", direct_acquire, METH_VARARGS,
     "acquire(names, owner, wait_ms, lease_ms) -> (machine, req) | None"},
    {"release", direct_release, METH_VARARGS,
     "release(names, owner, acquired_lease_ms) -> (machine, req) | None"},
    {"done", direct_done, METH_VARARGS,
     "done(machine, req) -> the machine's next action once the reply is fed and the "
     "connection given back, or None"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot direct_slots[] = {
    {Py_tp_new, direct_new},
    {Py_tp_dealloc, direct_dealloc},
    {Py_tp_traverse, direct_traverse},
    {Py_tp_clear, direct_clear},
    {Py_tp_methods, direct_methods},
    {Py_tp_doc, "Direct(client, pool, loop, window_ms, latch_ttl_ms, command_timeout_ms, "
                "watchdog_lease_ms, client_id, pid_box): one-server acquire and release "
                "attempts in one call (see python/_engine_direct.c)."},
    {0, NULL}};

static PyType_Spec direct_spec = {"hilock._engine.Direct", sizeof(DirectObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, direct_slots};
