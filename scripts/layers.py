#!/usr/bin/env python3
"""libcore's layers, read from the code.

    scripts/layers.py check [ROOT]     include rules (tests/lint runs it); exit 1 on a breach
    scripts/layers.py dot [ROOT]       the include graph per layer, Graphviz dot, on stdout
    scripts/layers.py stats [ROOT]     largest file, longest functions, cross-layer calls

The layers, bottom to top (docs/architecture.md):
    proto      the engine: names, scripts, commands, replies, machines. No I/O.
    base       util.c (time, errors, wake pipes, SIGPIPE, threads), uuid.c
    transport  connections, pool, pub/sub, drain, sentinel, watchdog
    api        the public functions over the opaque handles
A file may include the headers of its own layer and of the layers below;
a header in LAYER_ONLY only the files of its own layer may include.
Outside libcore/src only proto.h (installed as <hilock/engine.h>) and the
public hilock.h may be included; tests/ reach internals on purpose (they
link the static library) and are not checked. A source file the table
does not name counts as api (the top: it cannot include upward, and nothing
below may include it); name it in LAYER_OF when it belongs lower.
"""
import os
import re
import sys

LAYERS = ["proto", "base", "transport", "api"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# file -> layer; proto_*.c are proto by their name
LAYER_OF = {
    "proto.h": "proto", "proto_session.h": "proto", "proto.c": "proto", "reply.c": "proto", "url.c": "proto",
    "util.h": "base", "util.c": "base", "uuid.h": "base", "uuid.c": "base",
    "transport.h": "transport", "transport_impl.h": "transport", "transport.c": "transport",
    "conn.c": "transport", "nodes.c": "transport", "pool.c": "transport", "exec.c": "transport", "fanout.c": "transport",
    "tls.c": "transport",
    "pubsub.c": "transport", "drain.c": "transport", "sentinel.c": "transport",
    "watchdog.c": "transport", "stats.h": "transport", "stats.c": "transport",
    "api.h": "api", "internal.h": "api", "client.c": "api", "lock.c": "api", "pending.c": "api", "semaphore.c": "api",
    "multilock.c": "api", "inspect.c": "api",
    "async.c": "api", "async_sem.c": "api", "async_route.c": "api", "async_multilock.c": "api",
    "async_impl.h": "api",
}

# Headers only the files of their own layer may include (the layer above
# sees the layer through its main header only).
LAYER_ONLY = {"transport_impl.h"}

# Headers of libcore/src that code outside libcore may include.
PUBLIC_FROM_SRC = {"proto.h"}  # installed as <hilock/engine.h>

# Known breaches, each to be removed by the change that ends it. An entry
# that no longer matches anything is reported (remove it), not failed.
UPWARD_ALLOWED = set()
OUTSIDE_ALLOWED = {
    ("lua/hilock_engine.c", "uuid.h"),    # proto.uuid
    ("python/_engine.c", "uuid.h"),       # SemNames.wait's permit ids (_engine_sem.c)
}
OUTSIDE_DIRS = ["cli", "lua", "python", "bindings", "bench", "examples"]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(name):
    if name in LAYER_OF:
        return LAYER_OF[name]
    if name.startswith("proto_"):
        return "proto"
    return "api"


def src_dir(root):
    return os.path.join(root, "libcore", "src")


def src_files(root):
    d = src_dir(root)
    return sorted(f for f in os.listdir(d) if f.endswith((".c", ".h")))


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        return [os.path.basename(m) for m in INCLUDE_RE.findall(fh.read())]


def check(root):
    """Returns (breaches, notes): lists of strings."""
    breaches, notes, used = [], [], set()
    files = src_files(root)
    private = set(f for f in files if f.endswith(".h")) - PUBLIC_FROM_SRC
    for f in files:
        lf = layer_of(f)
        for inc in includes(os.path.join(src_dir(root), f)):
            if inc not in files:
                continue  # system, public (hilock.h) or generated
            li = layer_of(inc)
            if inc in LAYER_ONLY and li != lf:
                breaches.append(f"libcore/src/{f} ({lf}) includes {inc}, which only {li} files may")
                continue
            if RANK[li] > RANK[lf]:
                if (f, inc) in UPWARD_ALLOWED:
                    used.add(("up", f, inc))
                    continue
                breaches.append(f"libcore/src/{f} ({lf}) includes {inc} ({li}, a layer above)")
    for d in OUTSIDE_DIRS:
        top = os.path.join(root, d)
        for dirpath, _, names in os.walk(top):
            for n in sorted(names):
                if not n.endswith((".c", ".h", ".i", ".cc", ".cpp")):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                for inc in includes(path):
                    if inc not in private:
                        continue
                    # a file of its own directory with the same name is not ours
                    if os.path.exists(os.path.join(dirpath, inc)):
                        continue
                    if (rel, inc) in OUTSIDE_ALLOWED:
                        used.add(("out", rel, inc))
                        continue
                    breaches.append(f"{rel} includes libcore's private header {inc}")
    for f, inc in sorted(UPWARD_ALLOWED):
        if ("up", f, inc) not in used:
            notes.append(f"allow-list entry ({f}, {inc}) matches nothing any more: remove it")
    for f, inc in sorted(OUTSIDE_ALLOWED):
        if ("out", f, inc) not in used:
            notes.append(f"allow-list entry ({f}, {inc}) matches nothing any more: remove it")
    for f in files:
        if f not in LAYER_OF and not f.startswith("proto_"):
            notes.append(f"libcore/src/{f} is in no layer of scripts/layers.py: counted as api")
    return breaches, notes


def dot(root):
    """The layers as Graphviz: per layer its headers and one node for its
    source files (as LAYER_OF names them, so a new file changes the picture
    only once the table names it); an edge where a layer's sources or a
    header include a header; red where that goes upward (allow-listed debt)."""
    files = src_files(root)
    known_h = [f for f in files if f.endswith(".h") and f in LAYER_OF]
    out = ["// Generated by scripts/layers.py dot; tests/lint checks it is current.",
           "// libcore's layers (top = api): headers, and which includes which.",
           "digraph libcore {",
           "  rankdir=TB; newrank=true; node [shape=box, fontname=Helvetica, fontsize=10];",
           "  edge [color=gray40]; compound=true;"]
    for layer in reversed(LAYERS):
        srcs = sorted(f for f in LAYER_OF if LAYER_OF[f] == layer and f.endswith(".c"))
        if layer == "proto":
            srcs.append("proto_*.c")
        out.append(f"  subgraph cluster_{layer} {{")
        out.append(f'    label="{layer}"; style=rounded; color=gray60; fontname=Helvetica;')
        out.append(f'    "{layer} sources" [label="{layer}:\\n' + "\\n".join(srcs) +
                   '", shape=note];')
        for f in known_h:
            if layer_of(f) == layer:
                out.append(f'    "{f}" [style=filled, fillcolor=lightyellow];')
        out.append("  }")
    edges = set()
    for f in files:
        src = f if f in known_h else (f"{layer_of(f)} sources" if f.endswith(".c") else None)
        if not src:
            continue
        for inc in includes(os.path.join(src_dir(root), f)):
            if inc in known_h and inc != f:
                edges.add((src, inc, RANK[layer_of(inc)] > RANK[layer_of(f)]))
    for src, inc, up in sorted(edges):
        attr = ' [color=red, penwidth=2, label="upward"]' if up else ""
        out.append(f'  "{src}" -> "{inc}"{attr};')
    out.append("}")
    return "\n".join(out) + "\n"


# ---- stats: sizes and calls (a rough C reader: enough for this code base) ----

DEF_RE = re.compile(r"^(?!static\b)(?!typedef\b)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;]*$")
ANY_DEF_RE = re.compile(r"^(?:static\s+)?[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;]*$")


def strip_c(text):
    """Comments and string/char literals blanked, line structure kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """[(name, first_line, lines, public)] of the function definitions in a
    .c file whose body opens with '{' in column 0 (the project's style)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = strip_c(fh.read()).split("\n")
    found, i = [], 0
    while i < len(lines):
        m = ANY_DEF_RE.match(lines[i])
        if m and not lines[i].startswith((" ", "\t", "#", "}")):
            j = i
            while j < len(lines) and lines[j] != "{" and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j] == "{":
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                found.append((m.group(1), i + 1, k - i + 1, not lines[i].startswith("static")))
                i = k + 1
                continue
        i += 1
    return found


def stats(root, scope_dirs=("libcore/src",)):
    d = src_dir(root)
    cfiles = [f for f in src_files(root) if f.endswith(".c")]
    # largest files (all of the given dirs)
    sizes = []
    for sd in scope_dirs:
        for dirpath, _, names in os.walk(os.path.join(root, sd)):
            for n in names:
                if n.endswith((".c", ".h")):
                    p = os.path.join(dirpath, n)
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        sizes.append((sum(1 for _ in fh), os.path.relpath(p, root)))
    sizes.sort(reverse=True)
    funcs = []
    defined = {}  # public function -> file
    for f in cfiles:
        for name, line, n, public in functions(os.path.join(d, f)):
            funcs.append((n, name, f"libcore/src/{f}:{line}"))
            if public:
                defined[name] = f
    funcs.sort(reverse=True)
    # calls between files of different layers
    down = up = 0
    up_sites = []
    api_types = re.compile(r"\b(?:struct\s+)?hilock_(?:client|lock|rwlock|multilock)\b")
    struct_refs = []
    for f in src_files(root):
        with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
            text = strip_c(fh.read())
        lf = RANK[layer_of(f)]
        if f.endswith(".h"):
            if lf < RANK["api"]:
                struct_refs += [f"libcore/src/{f}:{ln}" for ln, line in
                                enumerate(text.split("\n"), 1) if api_types.search(line)]
            continue
        own = {n for n, *_ in functions(os.path.join(d, f))}
        for ln, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"\b([a-z_]\w*)\s*\(", line):
                name = m.group(1)
                g = defined.get(name)
                if not g or g == f or name in own:
                    continue
                lg = RANK[layer_of(g)]
                if lg == lf:
                    continue
                if lg > lf:
                    up += 1
                    up_sites.append(f"libcore/src/{f}:{ln} {name} ({g})")
                else:
                    down += 1
            if lf < RANK["api"] and api_types.search(line):
                struct_refs.append(f"libcore/src/{f}:{ln}")
    return sizes, funcs, down, up, up_sites, struct_refs


def main(argv):
    if len(argv) < 2 or argv[1] not in ("check", "dot", "stats"):
        sys.stderr.write(__doc__)
        return 2
    root = argv[2] if len(argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if argv[1] == "check":
        breaches, notes = check(root)
        for b in breaches:
            print(f"breach: {b}")
        for n in notes:
            print(f"note: {n}")
        return 1 if breaches else 0
    if argv[1] == "dot":
        sys.stdout.write(dot(root))
        return 0
    sizes, funcs, down, up, up_sites, struct_refs = stats(root)
    print("largest files (lines):")
    for n, p in sizes[:5]:
        print(f"  {n:5d}  {p}")
    print("longest functions (lines):")
    for n, name, where in funcs[:5]:
        print(f"  {n:5d}  {name}  {where}")
    print(f"calls between layers: {down + up} ({down} downward, {up} upward)")
    for s in up_sites:
        print(f"  upward: {s}")
    print(f"API handle types named below the API layer: {len(struct_refs)} lines")
    for s in struct_refs:
        print(f"  {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
