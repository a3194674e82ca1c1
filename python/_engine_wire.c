/*
 * hilock._engine.Wire: a plain (TCP or unix, not TLS) connection's socket,
 * read and written here instead of through an asyncio transport. Included
 * by _engine.c (it uses the Reader and ReplyFuture types).
 *
 * The asyncio transport's read path runs four Python frames per read
 * (_read_ready, _read_ready__get_buffer, the protocol's get_buffer and
 * buffer_updated) and its write path one more; with the driver's own
 * matching of replies to requests that is about what the whole engine
 * costs per round trip. A Wire is registered with loop.add_reader(fd, wire):
 * when the socket is readable the loop calls it, and it receives, parses,
 * matches each reply to the oldest request of the connection's queue (a
 * collections.deque of requests with .reply and .fut) and wakes that
 * request's ReplyFuture (wake_now: the waiting task runs at once). Writes
 * go straight to send(2); what the kernel does not take at once waits in
 * the Wire and goes out from a loop.add_writer callback.
 *
 * Everything else -- a reply nobody asked for (a pub/sub message), the end
 * of the stream, a read or write error, a stream the reader cannot parse --
 * is handed to the connection's on_event(reply_or_None) callback: a Reply
 * for a message, None when the connection is finished (the callback closes
 * it). A write error is reported through loop.call_soon, never from inside
 * write() (the caller may be half-way through queueing its request).
 *
 * The Wire owns the fd from construction (socket.detach()), closes it if
 * the construction fails after its arguments were read, and makes it
 * non-blocking; close() removes
 * it from the loop and closes it; a Wire that is freed still open closes
 * the fd (it cannot be registered then: the loop's handle holds a reference).
 * send(2) always passes MSG_NOSIGNAL: no SIGPIPE reaches the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#define WIRE_BUF 16384

typedef struct {
    PyObject_HEAD
    int fd;            /* -1 once closed */
    int writing;       /* registered with loop.add_writer */
    int ended;         /* the end was reported: out of the loop, fd still open */
    PyObject *loop;
    PyObject *reader;   /* a ReaderObject */
    PyObject *pending;  /* collections.deque of requests */
    PyObject *on_event; /* callable(reply_or_None) */
    PyObject *flush;    /* the bound flush method (add_writer's callback), or NULL */
    char *out;          /* bytes not yet sent */
    size_t outlen, outcap;
    char buf[WIRE_BUF];
} WireObject;

static PyTypeObject *WireType;
/* hilock.aio's requests (_engine_direct.c) */
typedef struct {
    PyObject_HEAD
    PyObject *conn;
    PyObject *fut;
    PyObject *reply;
    char failed;
    double deadline;
} ReqObject;
static PyTypeObject *ReqType;
static PyObject *s_popleft, *s_reply, *s_fut, *s_add_writer, *s_remove_writer,
    *s_remove_reader, *s_call_soon;

static int wire_strings(void)
{
    if (s_call_soon)
        return 0;
    s_popleft = PyUnicode_InternFromString("popleft");
    s_reply = PyUnicode_InternFromString("reply");
    s_fut = PyUnicode_InternFromString("fut");
    s_add_writer = PyUnicode_InternFromString("add_writer");
    s_remove_writer = PyUnicode_InternFromString("remove_writer");
    s_remove_reader = PyUnicode_InternFromString("remove_reader");
    s_call_soon = PyUnicode_InternFromString("call_soon");
    return s_popleft && s_reply && s_fut && s_add_writer && s_remove_writer &&
                   s_remove_reader && s_call_soon
               ? 0
               : -1;
}

/* Wire(fd, loop, reader, pending, on_event) */
static PyObject *wire_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    int fd;
    PyObject *loop, *reader, *pending, *on_event;
    if ((kw && PyDict_Size(kw)) ||
        !PyArg_ParseTuple(args, "iOO!OO:Wire", &fd, &loop, ReaderType, &reader, &pending,
                          &on_event)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Wire() takes no keyword arguments");
        return NULL;
    }
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "Wire: fd must be >= 0");
        return NULL;
    }
    /* from here the fd is the Wire's: closed on every failure */
    if (!PyCallable_Check(on_event)) {
        PyErr_SetString(PyExc_TypeError, "Wire: on_event must be callable");
        close(fd);
        return NULL;
    }
    if (wire_strings() != 0 || fut_imports() != 0) {
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(fd);
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    WireObject *o = (WireObject *)alloc(type, 0);
    if (!o) {
        close(fd);
        return NULL;
    }
    o->fd = fd;
    o->writing = 0;
    o->ended = 0;
    Py_INCREF(loop);
    o->loop = loop;
    Py_INCREF(reader);
    o->reader = reader;
    Py_INCREF(pending);
    o->pending = pending;
    Py_INCREF(on_event);
    o->on_event = on_event;
    o->flush = NULL;
    o->out = NULL;
    o->outlen = o->outcap = 0;
    return (PyObject *)o;
}

static int wire_traverse(PyObject *self, visitproc visit, void *arg)
{
    WireObject *o = (WireObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->loop);
    Py_VISIT(o->reader);
    Py_VISIT(o->pending);
    Py_VISIT(o->on_event);
    Py_VISIT(o->flush);
    return 0;
}

static int wire_clear(PyObject *self)
{
    WireObject *o = (WireObject *)self;
    Py_CLEAR(o->loop);
    Py_CLEAR(o->reader);
    Py_CLEAR(o->pending);
    Py_CLEAR(o->on_event);
    Py_CLEAR(o->flush);
    return 0;
}

static void wire_dealloc(PyObject *self)
{
    WireObject *o = (WireObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (o->fd >= 0)
        close(o->fd);
    free(o->out);
    wire_clear(self);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(self);
    Py_DECREF(tp);
}

/* on_event(arg) now */
static int wire_event(WireObject *o, PyObject *arg)
{
    PyObject *r = PyObject_CallFunctionObjArgs(o->on_event, arg, NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int wire_writer(WireObject *o, int on);

/* out of the loop's reader and writer, fd still open; ended set */
static int wire_leave(WireObject *o)
{
    o->ended = 1;
    if (wire_writer(o, 0) != 0)
        return -1;
    PyObject *fdo = PyLong_FromLong(o->fd);
    PyObject *r = fdo ? PyObject_CallMethodObjArgs(o->loop, s_remove_reader, fdo, NULL) : NULL;
    Py_XDECREF(fdo);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* the end of the stream, an error or a broken stream: out of the loop
   (a level-triggered reader would call again), on_event(None) once */
static int wire_end(WireObject *o)
{
    if (o->ended || o->fd < 0)
        return 0;
    if (wire_leave(o) != 0)
        return -1;
    return wire_event(o, Py_None);
}

/* as wire_end, on_event(None) through loop.call_soon (a write error: the
   writer may be half-way through queueing its request) */
static int wire_end_soon(WireObject *o)
{
    if (o->ended || o->fd < 0)
        return 0;
    if (wire_leave(o) != 0)
        return -1;
    PyObject *r = PyObject_CallMethodObjArgs(o->loop, s_call_soon, o->on_event, Py_None, NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* one reply: to the oldest request of pending (its reply set, its
   ReplyFuture woken now), or to on_event(reply) when none waits */
static int deliver_reply(PyObject *pending, PyObject *on_event, PyObject *reply)
{
    Py_ssize_t n = PyObject_Length(pending);
    if (n < 0)
        return -1;
    if (n == 0) {
        PyObject *r = PyObject_CallFunctionObjArgs(on_event, reply, NULL);
        if (!r)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    PyObject *req = PyObject_CallMethodObjArgs(pending, s_popleft, NULL);
    if (!req)
        return -1;
    PyObject *fut;
    if (Py_TYPE(req) == ReqType) { /* hilock.aio's requests: their fields directly */
        ReqObject *q = (ReqObject *)req;
        PyObject *old = q->reply;
        Py_INCREF(reply);
        q->reply = reply;
        Py_XDECREF(old);
        fut = q->fut;
        Py_XINCREF(fut);
        if (!fut)
            PyErr_SetString(PyExc_AttributeError, "Req without a future");
    } else {
        int rc = PyObject_SetAttr(req, s_reply, reply);
        fut = rc == 0 ? PyObject_GetAttr(req, s_fut) : NULL;
    }
    Py_DECREF(req);
    if (!fut)
        return -1;
    PyObject *r;
    if (Py_TYPE(fut) == FutType) {
        FutObject *f = (FutObject *)fut;
        r = f->state ? (Py_INCREF(Py_None), Py_None) : fut_finish(f, 1, 1);
    } else {
        r = PyObject_CallMethod(fut, "wake_now", NULL);
    }
    Py_DECREF(fut);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Every complete reply the reader holds, delivered (deliver_reply), while
 * w (when given) stays open: 0; 1 when the stream cannot be parsed (the
 * reader is marked broken; the caller ends the connection); -1 with a
 * Python exception. */
static int deliver_all(ReaderObject *rd, PyObject *pending, PyObject *on_event, WireObject *w)
{
    while (!w || w->fd >= 0) {
        void *rep = NULL;
        if (redisReaderGetReply(rd->rd, &rep) != REDIS_OK) {
            rd->broken = 1;
            return 1;
        }
        if (!rep)
            return 0;
        PyObject *reply = new_reply((redisReply *)rep);
        if (!reply)
            return -1;
        int rc = deliver_reply(pending, on_event, reply);
        Py_DECREF(reply);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* rd.deliver(bytearray, n, pending, on_event) -> bool: its first n bytes
 * fed, then every complete reply to the oldest request of pending or to
 * on_event (as a Wire does: the TLS connections' read path). False when
 * the stream cannot be parsed (nothing more to trust: close). */
static PyObject *reader_deliver(PyObject *self, PyObject *args)
{
    ReaderObject *rd = (ReaderObject *)self;
    PyObject *ba, *pending, *on_event;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!nOO:deliver", &PyByteArray_Type, &ba, &n, &pending,
                          &on_event))
        return NULL;
    if (n < 0 || n > PyByteArray_Size(ba)) {
        PyErr_SetString(PyExc_ValueError, "deliver: n out of the buffer's range");
        return NULL;
    }
    if (wire_strings() != 0 || fut_imports() != 0)
        return NULL;
    if (rd->broken || redisReaderFeed(rd->rd, PyByteArray_AsString(ba), (size_t)n) != REDIS_OK) {
        rd->broken = 1;
        Py_RETURN_FALSE;
    }
    Py_INCREF(self); /* a wake-up may drop the connection holding it */
    int rc = deliver_all(rd, pending, on_event, NULL);
    Py_DECREF(self);
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc == 0);
}

/* wire(): the loop's read callback */
static PyObject *wire_call(PyObject *self, PyObject *args, PyObject *kw)
{
    WireObject *o = (WireObject *)self;
    if ((args && PyTuple_Size(args)) || (kw && PyDict_Size(kw))) {
        PyErr_SetString(PyExc_TypeError, "Wire() takes no arguments when called");
        return NULL;
    }
    if (o->fd < 0 || o->ended)
        Py_RETURN_NONE;
    ssize_t n = recv(o->fd, o->buf, sizeof o->buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        Py_RETURN_NONE;
    if (n <= 0)
        return wire_end(o) ? NULL : (Py_INCREF(Py_None), Py_None);
    Py_INCREF(self); /* a wake-up may close the connection and drop it */
    PyObject *res = NULL;
    ReaderObject *rd = (ReaderObject *)o->reader;
    Py_INCREF(rd);
    if (rd->broken || redisReaderFeed(rd->rd, o->buf, (size_t)n) != REDIS_OK) {
        rd->broken = 1;
        if (wire_end(o) == 0)
            res = (Py_INCREF(Py_None), Py_None);
        goto out;
    }
    int rc = deliver_all(rd, o->pending, o->on_event, o);
    if (rc < 0 || (rc == 1 && wire_end(o) != 0))
        goto out;
    res = (Py_INCREF(Py_None), Py_None);
out:
    Py_DECREF(rd);
    Py_DECREF(self);
    return res;
}

static int wire_writer(WireObject *o, int on)
{
    if (o->writing == on)
        return 0;
    PyObject *fdo = PyLong_FromLong(o->fd);
    if (!fdo)
        return -1;
    PyObject *r;
    if (on) {
        if (!o->flush)
            o->flush = PyObject_GetAttrString((PyObject *)o, "flush");
        r = o->flush ? PyObject_CallMethodObjArgs(o->loop, s_add_writer, fdo, o->flush, NULL)
                     : NULL;
    } else {
        r = PyObject_CallMethodObjArgs(o->loop, s_remove_writer, fdo, NULL);
    }
    Py_DECREF(fdo);
    if (!r)
        return -1;
    Py_DECREF(r);
    o->writing = on;
    return 0;
}

/* send what waits; 0, or -1 with errno (not EAGAIN) */
static int wire_push(WireObject *o)
{
    size_t off = 0;
    while (off < o->outlen) {
        ssize_t n = send(o->fd, o->out + off, o->outlen - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        off += (size_t)n;
    }
    memmove(o->out, o->out + off, o->outlen - off);
    o->outlen -= off;
    return 0;
}

/* wire.write(bytes): send now, or queue behind what waits */
static PyObject *wire_send(WireObject *o, const char *data, Py_ssize_t len);

static PyObject *wire_write(PyObject *self, PyObject *arg)
{
    char *data;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &data, &len) != 0)
        return NULL;
    return wire_send((WireObject *)self, data, len);
}

/* data sent now, or queued behind what waits (wire.write's work) */
static PyObject *wire_send(WireObject *o, const char *data, Py_ssize_t len)
{
    if (o->fd < 0 || o->ended || len == 0)
        Py_RETURN_NONE;
    size_t off = 0;
    if (o->outlen == 0) {
        while (off < (size_t)len) {
            ssize_t n = send(o->fd, data + off, (size_t)len - off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                return wire_end_soon(o) ? NULL : (Py_INCREF(Py_None), Py_None);
            }
            off += (size_t)n;
        }
        if (off == (size_t)len)
            Py_RETURN_NONE;
    }
    size_t rest = (size_t)len - off;
    if (o->outlen + rest > o->outcap) {
        size_t cap = o->outcap ? o->outcap : 4096;
        while (cap < o->outlen + rest)
            cap *= 2;
        char *p = realloc(o->out, cap);
        if (!p)
            return PyErr_NoMemory();
        o->out = p;
        o->outcap = cap;
    }
    memcpy(o->out + o->outlen, data + off, rest);
    o->outlen += rest;
    if (wire_writer(o, 1) != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* wire.flush(): the loop's write callback */
static PyObject *wire_flush(PyObject *self, PyObject *unused)
{
    (void)unused;
    WireObject *o = (WireObject *)self;
    if (o->fd < 0 || o->ended)
        Py_RETURN_NONE;
    if (wire_push(o) != 0)
        return wire_end(o) ? NULL : (Py_INCREF(Py_None), Py_None);
    if (o->outlen == 0 && wire_writer(o, 0) != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* wire.close(): out of the loop, fd closed (unsent bytes dropped); idempotent */
static PyObject *wire_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    WireObject *o = (WireObject *)self;
    if (o->fd < 0)
        Py_RETURN_NONE;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (wire_writer(o, 0) != 0)
        PyErr_Fetch(&et, &ev, &tb);
    PyObject *fdo = PyLong_FromLong(o->fd);
    PyObject *r = fdo ? PyObject_CallMethodObjArgs(o->loop, s_remove_reader, fdo, NULL) : NULL;
    Py_XDECREF(fdo);
    Py_XDECREF(r);
    close(o->fd);
    o->fd = -1;
    o->outlen = 0;
    o->writing = 0;
    Py_CLEAR(o->flush); /* the cycle wire -> bound method -> wire */
    if (et) {
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    if (!r)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *wire_fileno(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(((WireObject *)self)->fd);
}

static PyObject *wire_buffered(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(((WireObject *)self)->outlen);
}

static PyMethodDef wire_methods[] = {
    {"write", wire_write, METH_O, "write(bytes): sent now, or queued and sent when writable"},
    {"flush", wire_flush, METH_NOARGS, "the loop's write callback"},
    {"close", wire_close, METH_NOARGS, "leave the loop and close the fd (idempotent)"},
    {"fileno", wire_fileno, METH_NOARGS, "the fd, -1 once closed"},
    {"buffered", wire_buffered, METH_NOARGS, "bytes written and not yet sent"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot wire_slots[] = {
    {Py_tp_new, wire_new},
    {Py_tp_dealloc, wire_dealloc},
    {Py_tp_traverse, wire_traverse},
    {Py_tp_clear, wire_clear},
    {Py_tp_call, wire_call},
    {Py_tp_methods, wire_methods},
    {Py_tp_doc, "Wire(fd, loop, reader, pending, on_event): a plain connection's socket, "
                "read and written by the engine (see python/_engine_wire.c)."},
    {0, NULL}};

static PyType_Spec wire_spec = {"hilock._engine.Wire", sizeof(WireObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, wire_slots};
