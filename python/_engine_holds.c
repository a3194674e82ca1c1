/*
 * hilock._engine, part four: the session's hold table (libcore's
 * proto_session.c) for Python drivers that do their own I/O (hilock.aio).
 *
 * Not a translation unit of its own: _engine.c includes it.
 *
 *   Holds(watchdog_lease_ms, command_timeout_ms)  one client's table; a
 *                          hold is named by a hashable key of the driver's
 *     .grant(key, watchdog, lease_ms, sent_at)  a grant written at sent_at
 *     .remove(key)         released, dropped: never handed out again
 *     .heard(key, reply, now) -> bool   a pub/sub frame heard on the hold's
 *                          lock channel: True when the session made that
 *                          hold due for a check (hl_holds_heard)
 *     .check(key, now) -> bool   check it now, for the driver's reason
 *     .check_next(now) -> key | None   the next hold to check (send its
 *                          Names.hold_check_cmd), marked as checking
 *     .check_outcome(key, gone)   gone: True (lost), False, None (no usable
 *                          answer: hold_gone's values)
 *     .lost_next() -> key | None   a hold a check found gone, once
 *     .unheard(key, now) -> bool   the hold's pub/sub connection is not
 *                          known alive (Sublive.due's SUBLIVE_CHECK): True
 *                          when a check of it became due (hl_holds_heard
 *                          with HL_PS_UNHEARD)
 *     .renew_due(now, horizon) -> [key, ...]   the watchdog holds whose
 *                          renewal is due by now + horizon, marked as sent
 *                          at now (hl_holds_renew_next); feed each one's
 *                          outcome, whatever happened
 *     .outcome(key, RENEW_*, acked, sent_at) -> RENEW_*   a renewal's
 *                          outcome (hl_holds_outcome), as applied
 *     .doubt_next(now) -> key | None   a hold to report lost "in doubt"
 *     .end_next(now) -> key | None     a fixed lease that ended (out of
 *                          the table: stop listening)
 *     .next() -> ms        the earliest deadline of the above and of the
 *                          checks (-1: none): call them then
 *     .is_lost(key, now) -> bool   lost, reported, or in doubt now
 *     .state(key) -> (watchdog, confirmed_at, doubted)   KeyError: none
 *     .count() -> n        holds in the table
 *
 *   Sublive(command_timeout_ms)  one pub/sub connection's liveness
 *                          (hl_sublive): a PING (the module's ping_cmd()) when nothing
 *                          was heard for an interval, given up when it is
 *                          unanswered as long again
 *     .opened(now) .heard(now) .closed(now) .idle()   what happened to it
 *     .due(now) -> SUBLIVE_* flags   PING: write ping_cmd() now; RESET:
 *                          close it and open another; CHECK: feed every
 *                          hold listening on it to Holds.unheard
 *     .next() -> ms        when due has something next (-1: nothing)
 *     .alive() -> bool
 *
 * Keys not in the table are ignored (heard, check, check_outcome: False /
 * nothing). Times are monotonic ms of the driver's clock.
 *
 *   Unsettled()            the session's record of acquire attempts that may
 *                          have been granted and are not settled
 *                          (hl_unsettled_*, one per client)
 *     .after(m)            m, an Acquire machine that ended: recorded when
 *                          its settle failed every try (hl_acquire.unsettled)
 *     .before(names, owner, window_ms) -> None | True | Acquire
 *                          before owner's acquire of names' lock: None, go
 *                          on; True, an attempt of theirs is being settled
 *                          (wait, or fail the acquire); an Acquire machine:
 *                          drive it to its end (it only settles the earlier
 *                          attempt, hl_acquire_resettle), then .settled(it)
 *                          and ask again
 *     .settled(m) -> bool  the settle machine's end: True settled (the
 *                          record is forgotten), False (kept until its lease
 *                          ran out); a machine dropped first counts as False
 *   Acquire.on_unknown(..., unsettled) records the attempt settling until
 *   its Settle's end (hl_settle.settled), or its dealloc (not settled).
 *
 * The times of Unsettled are the binding's clock (the machines' own).
 */


typedef struct {
    hl_hold h;      /* h.ref: this record */
    PyObject *key;  /* borrowed: the dict's key keeps it alive */
} HoldRec;

typedef struct {
    PyObject_HEAD
    hl_holds t;
    PyObject *recs; /* key -> capsule of a HoldRec */
} HoldsObject;

static PyTypeObject *HoldsType;

static void holdrec_free(PyObject *cap)
{
    PyMem_Free(PyCapsule_GetPointer(cap, "hilock.hold"));
}

static PyObject *holds_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    long long lease, cto;
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, "LL:Holds", &lease, &cto))
        return NULL;
    if (check_range(lease, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms") ||
        check_range(cto, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms"))
        return NULL;
    HoldsObject *o = PyObject_New(HoldsObject, type);
    if (!o)
        return NULL;
    hl_holds_init(&o->t, lease, cto);
    o->recs = PyDict_New();
    if (!o->recs) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static void holds_dealloc(PyObject *self)
{
    HoldsObject *o = (HoldsObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    hl_holds_free(&o->t); /* before the records the table points to */
    Py_XDECREF(o->recs);
    PyObject_Free(self);
    Py_DECREF(tp);
}

/* key's record, or NULL (none: no exception set, unless one was raised) */
static HoldRec *holds_find(HoldsObject *o, PyObject *key)
{
    PyObject *cap = PyDict_GetItemWithError(o->recs, key);
    if (!cap)
        return NULL;
    return PyCapsule_GetPointer(cap, "hilock.hold");
}

static PyObject *holds_grant(PyObject *self, PyObject *args)
{
    HoldsObject *o = (HoldsObject *)self;
    PyObject *key;
    int watchdog;
    long long lease, sent_at;
    if (!PyArg_ParseTuple(args, "OpLL:grant", &key, &watchdog, &lease, &sent_at))
        return NULL;
    HoldRec *rec = holds_find(o, key);
    if (!rec && PyErr_Occurred())
        return NULL;
    if (!rec) {
        rec = PyMem_Malloc(sizeof *rec);
        if (!rec)
            return PyErr_NoMemory();
        hl_hold_init(&rec->h, rec, 0);
        PyObject *cap = PyCapsule_New(rec, "hilock.hold", holdrec_free);
        if (!cap) {
            PyMem_Free(rec);
            return NULL;
        }
        int rc = PyDict_SetItem(o->recs, key, cap);
        Py_DECREF(cap);
        if (rc != 0)
            return NULL;
        rec->key = key;
    }
    if (hl_holds_grant(&o->t, &rec->h, watchdog, lease, sent_at) != 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *holds_remove(PyObject *self, PyObject *key)
{
    HoldsObject *o = (HoldsObject *)self;
    HoldRec *rec = holds_find(o, key);
    if (!rec) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    hl_holds_remove(&o->t, &rec->h);
    if (PyDict_DelItem(o->recs, key) != 0) /* frees rec */
        return NULL;
    Py_RETURN_NONE;
}

/* the hold of key, or NULL with an exception set (KeyError for none) */
static HoldRec *holds_get(HoldsObject *o, PyObject *key)
{
    HoldRec *rec = holds_find(o, key);
    if (!rec && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return rec;
}

/* state(key) -> (watchdog, confirmed_at, doubted): KeyError for none */
static PyObject *holds_state(PyObject *self, PyObject *key)
{
    HoldRec *rec = holds_get((HoldsObject *)self, key);
    if (!rec)
        return NULL;
    return Py_BuildValue("(NLN)", PyBool_FromLong(rec->h.watchdog),
                         (long long)rec->h.confirmed_at, PyBool_FromLong(rec->h.doubted));
}

/* for the dispatcher (_engine.c): the table, a key's hold, a hold's key */
static hl_holds *holds_table(PyObject *self) { return &((HoldsObject *)self)->t; }

static int holds_lookup(PyObject *self, PyObject *key, hl_hold **h)
{
    HoldRec *rec = holds_find((HoldsObject *)self, key);
    *h = rec ? &rec->h : NULL;
    return !rec && PyErr_Occurred() ? -1 : 0;
}

static PyObject *hold_key(hl_hold *h)
{
    PyObject *key = ((HoldRec *)h->ref)->key;
    Py_INCREF(key);
    return key;
}

/* the methods of hb_holds_fns named for Python: one wrapper each */
#define HB_PYHWRAP(fn, py, lua, args, words, doc)                                           \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_holds_fns[HBL_##fn], self, a);                                  \
    }
HB_HOLDS_FNS(HB_PYHWRAP)

/* the hand-written methods, then hb_holds_fns' (filled once, at import) */
static PyMethodDef holds_methods[4 + HBH_COUNT] = {
    {"grant", holds_grant, METH_VARARGS, "grant(key, watchdog, lease_ms, sent_at)"},
    {"remove", holds_remove, METH_O, "remove(key)"},
    {"state", holds_state, METH_O, "state(key) -> (watchdog, confirmed_at, doubted)"}};

static void holds_methods_fill(void)
{
    static const PyCFunction wrappers[] = {HB_HOLDS_FNS(HB_PYPTR)};
    for (int i = 0, n = 3; i < HBH_COUNT; i++)
        if (hb_holds_fns[i].py)
            holds_methods[n++] = (PyMethodDef){hb_holds_fns[i].py, wrappers[i], METH_VARARGS,
                                               hb_holds_fns[i].doc};
}

static PyType_Slot holds_slots[] = {
    {Py_tp_new, holds_new},
    {Py_tp_dealloc, holds_dealloc},
    {Py_tp_methods, holds_methods},
    {Py_tp_doc, "Holds(watchdog_lease_ms, command_timeout_ms): the session's hold table "
                "(which holds to check after a frame on their lock's channel)."},
    {0, NULL}};

static PyType_Spec holds_spec = {"hilock._engine.Holds", sizeof(HoldsObject), 0,
                                 Py_TPFLAGS_DEFAULT, holds_slots};


/* ------------------------------------------------------------ unsettled */

typedef struct {
    PyObject_HEAD
    hl_unsettled t;
} UnsettledObject;

static PyTypeObject *UnsettledType;

static PyObject *unsettled_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, ":Unsettled"))
        return NULL;
    UnsettledObject *o = PyObject_New(UnsettledObject, type);
    if (!o)
        return NULL;
    hl_unsettled_init(&o->t, 0);
    return (PyObject *)o;
}

static void unsettled_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    hl_unsettled_free(&((UnsettledObject *)self)->t); /* no machine refers to it: they hold it */
    PyObject_Free(self);
    Py_DECREF(tp);
}

static void unsettled_end_rec(PyObject **utable, hl_unsettled_acq **urec, int settled)
{
    if (!*urec)
        return;
    hl_unsettled_settle_end(&((UnsettledObject *)*utable)->t, *urec, settled, hb_mono_ms());
    *urec = NULL;
    Py_CLEAR(*utable);
}

/* m's attempt (its reply did not come in time) recorded settling in table
 * (an Unsettled; anything else: NULL), or NULL (no latch: only its own
 * reply can settle it; no room or no memory: it ends with its lease) */
static hl_unsettled_acq *unsettled_put_settling(PyObject *table, AcquireObject *m)
{
    if (!PyObject_TypeCheck(table, UnsettledType) || !m->ok || !m->a.latch)
        return NULL;
    return hl_unsettled_put(&((UnsettledObject *)table)->t, m->a.names->name, m->owner,
                            m->a.latch, m->a.latch_ttl_ms, m->a.lease_ms, 1, hb_mono_ms());
}

static AcquireObject *unsettled_machine(PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, AcquireType)) {
        PyErr_SetString(PyExc_TypeError, "an Acquire machine");
        return NULL;
    }
    return (AcquireObject *)arg;
}

static PyObject *unsettled_after(PyObject *self, PyObject *arg)
{
    AcquireObject *m = unsettled_machine(arg);
    if (!m)
        return NULL;
    if (!m->ok || !m->a.unsettled || !m->a.latch || m->urec)
        Py_RETURN_FALSE;
    m->a.unsettled = 0; /* recorded once */
    /* no room or no memory: the grant ends with its lease, as before */
    return PyBool_FromLong(hl_unsettled_put(&((UnsettledObject *)self)->t, m->a.names->name,
                                            m->owner, m->a.latch, m->a.latch_ttl_ms,
                                            m->a.lease_ms, 0, hb_mono_ms()) != NULL);
}

static PyObject *unsettled_before(PyObject *self, PyObject *args)
{
    UnsettledObject *o = (UnsettledObject *)self;
    PyObject *names;
    const char *owner;
    long long window;
    if (!PyArg_ParseTuple(args, "O!sL:before", NamesType, &names, &owner, &window))
        return NULL;
    hl_unsettled_acq *u = NULL;
    hl_unsettled_step st =
        hl_unsettled_next(&o->t, ((NamesObject *)names)->n.name, owner, hb_mono_ms(), &u);
    if (st == HL_UNSETTLED_NONE)
        Py_RETURN_NONE;
    if (st == HL_UNSETTLED_WAIT)
        Py_RETURN_TRUE;
    /* SETTLE: u is marked settling until the machine's end (settled, dealloc) */
    AcquireObject *m = (AcquireObject *)acquire_make(names, owner, 0, u->lease_ms > 0 ?
                                                     u->lease_ms : 1, window, -1, 0, 0, 0);
    int rc = m ? hl_acquire_set_latch(&m->a, u->latch, u->latch_ttl_ms) : 0;
    if (!m || rc) {
        hl_unsettled_settle_end(&o->t, u, 0, hb_mono_ms());
        Py_XDECREF(m);
        return m ? raise_code(rc, "acquire latch") : NULL;
    }
    hl_acquire_resettle(&m->a);
    Py_INCREF(self);
    m->utable = self;
    m->urec = u;
    return (PyObject *)m;
}

static PyObject *unsettled_settled(PyObject *self, PyObject *arg)
{
    (void)self;
    AcquireObject *m = unsettled_machine(arg);
    if (!m)
        return NULL;
    int settled = m->urec && !m->a.unsettled && m->a.result == 0;
    unsettled_end(m, settled);
    return PyBool_FromLong(settled);
}

/* bool(u): any record (a driver's cheap test before .before) */
static int unsettled_bool(PyObject *self)
{
    return ((UnsettledObject *)self)->t.count > 0;
}

static hl_unsettled *unsettled_of(PyObject *self) { return &((UnsettledObject *)self)->t; }

/* hb_unsettled_fns, one wrapper each */
#define HB_PYUWRAP(fn, py, lua, args, words, doc)                                           \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_unsettled_fns[HBL_##fn], self, a);                              \
    }
HB_UNSETTLED_FNS(HB_PYUWRAP)

/* the hand-written methods, then hb_unsettled_fns' (filled once, at import) */
static PyMethodDef unsettled_methods[4 + HBU_COUNT] = {
    {"after", unsettled_after, METH_O, "after(m) -> recorded"},
    {"before", unsettled_before, METH_VARARGS,
     "before(names, owner, window_ms) -> None | True | Acquire"},
    {"settled", unsettled_settled, METH_O, "settled(m) -> bool"}};

static void unsettled_methods_fill(void)
{
    static const PyCFunction wrappers[] = {HB_UNSETTLED_FNS(HB_PYPTR)};
    for (int i = 0, n = 3; i < HBU_COUNT; i++)
        if (hb_unsettled_fns[i].py)
            unsettled_methods[n++] = (PyMethodDef){hb_unsettled_fns[i].py, wrappers[i],
                                                   METH_VARARGS, hb_unsettled_fns[i].doc};
}

static PyType_Slot unsettled_slots[] = {
    {Py_tp_new, unsettled_new},
    {Py_tp_dealloc, unsettled_dealloc},
    {Py_tp_methods, unsettled_methods},
    {Py_nb_bool, unsettled_bool},
    {Py_tp_doc, "Unsettled(): the session's acquire attempts not settled (settled again "
                "before their owner's next acquire of the lock)."},
    {0, NULL}};

static PyType_Spec unsettled_spec = {"hilock._engine.Unsettled", sizeof(UnsettledObject), 0,
                                     Py_TPFLAGS_DEFAULT, unsettled_slots};


/* ------------------------------------------------------------- sublive */

typedef struct {
    PyObject_HEAD
    hl_sublive s;
} SubliveObject;

static PyTypeObject *SubliveType;

static PyObject *sublive_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    long long cto;
    if ((kw && PyDict_Size(kw)) || !PyArg_ParseTuple(args, "L:Sublive", &cto))
        return NULL;
    if (check_range(cto, 0, HILOCK_MAX_TIME_MS, "command_timeout_ms"))
        return NULL;
    SubliveObject *o = PyObject_New(SubliveObject, type);
    if (!o)
        return NULL;
    hl_sublive_init(&o->s, cto);
    return (PyObject *)o;
}

static void sublive_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static hl_sublive *sublive_of(PyObject *self) { return &((SubliveObject *)self)->s; }

/* hb_sublive_fns, one wrapper each (filled once, at import) */
#define HB_PYSWRAP(fn, py, lua, args, words, doc)                                           \
    static PyObject *py_##fn(PyObject *self, PyObject *a)                                    \
    {                                                                                        \
        return hb_invoke(&hb_sublive_fns[HBL_##fn], self, a);                                \
    }
HB_SUBLIVE_FNS(HB_PYSWRAP)
static PyMethodDef sublive_methods[1 + HBS_COUNT];

static void sublive_methods_fill(void)
{
    static const PyCFunction wrappers[] = {HB_SUBLIVE_FNS(HB_PYPTR)};
    for (int i = 0; i < HBS_COUNT; i++)
        sublive_methods[i] = (PyMethodDef){hb_sublive_fns[i].py, wrappers[i], METH_VARARGS,
                                           hb_sublive_fns[i].doc};
}

static PyType_Slot sublive_slots[] = {
    {Py_tp_new, sublive_new},
    {Py_tp_dealloc, sublive_dealloc},
    {Py_tp_methods, sublive_methods},
    {Py_tp_doc, "Sublive(command_timeout_ms): the session's liveness rule of one pub/sub "
                "connection (a PING when quiet, given up when unanswered, its holds checked "
                "while it is not known alive)."},
    {0, NULL}};

static PyType_Spec sublive_spec = {"hilock._engine.Sublive", sizeof(SubliveObject), 0,
                                   Py_TPFLAGS_DEFAULT, sublive_slots};

