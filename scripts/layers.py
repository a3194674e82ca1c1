#!/usr/bin/env python3
"""libcore's layers, read from the code.

    scripts/layers.py check [ROOT]     include rules (tests/lint runs it); exit 1 on a breach
    scripts/layers.py dot [ROOT]       the include graph per layer, Graphviz dot, on stdout
    scripts/layers.py stats [ROOT]     largest file, longest functions, cross-layer calls

The layers, bottom to top (docs/architecture.md), one folder of
libcore/src each; a file's layer is the folder it is in:
    engine     the protocol engine: names, scripts, commands, replies, machines,
               the session. No I/O (its one read of the kernel: uuid.c's random
               bytes, which only drivers call), no threads, time passed in.
    transport  connections, pool, pub/sub, drain, sentinel, watchdog, stats,
               util.c (time, errors, wake pipes, SIGPIPE, threads)
    api        the public functions over the opaque handles, hilock_async
A transport file names no lock kind: no HILOCK_KIND_* and no hl_rw_* or
hl_sem_* (read-write or semaphore engine calls), comments included (issue 31's
grep); what differs per kind is the engine's to decide (hl_renew_alone,
hl_hold_channel, hl_cmd_renew_kind) or the api layer's to pass in.
A file may include the headers of its own layer and of the layers below; a
header named *_impl.h only the files of its own folder may include (the layer
above sees the layer through its main header only). A source or header
outside the layer folders, or a header name found in two folders, is a breach.
Outside libcore only proto.h (installed as <hilock/engine.h>) and the public
hilock.h may be included (the build puts only engine/ and include/ on their
path), and outside code may not declare a function of a private header
itself; tests/ reach internals on purpose (they link hilock_internals) and
are not checked.
"""
import os
import re
import sys

LAYERS = ["engine", "transport", "api"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Headers of libcore/src that code outside libcore may include.
PUBLIC_FROM_SRC = {"proto.h"}  # installed as <hilock/engine.h>

# Known breaches, each to be removed by the change that ends it. An entry
# that no longer matches anything is reported (remove it), not failed.
UPWARD_ALLOWED = set()
OUTSIDE_ALLOWED = set()
# (file, function): code outside libcore that declares a function of a
# private header itself, reaching past the header rule.
DECLARED_ALLOWED = {
    # the bench-only switch of the acquire and hold figures (api/api.h); a
    # public switch would end it
    ("bench/c/stats_bench.c", "hl_client_stats_off"),
}
OUTSIDE_DIRS = ["cli", "lua", "python", "bindings", "bench", "examples"]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a prototype at file scope (column 0, ends in ';' before any '{')
PROTO_RE = re.compile(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b(hl_\w+)\s*\([^;{]*\)[^;{]*;", re.M)
FUNC_NAME_RE = re.compile(r"\b(hl_\w+)\s*\(")
# what a transport file may not name (issue 31: `grep -lE 'HILOCK_KIND_|hl_(rw|sem)_'`)
KIND_RE = re.compile(r"HILOCK_KIND_\w*|hl_(?:rw|sem)_\w*")


def src_dir(root):
    return os.path.join(root, "libcore", "src")


def scan(root):
    """{file name: layer folder} of libcore/src's .c/.h files, and the
    strays: files outside a layer folder, names found in two folders."""
    d, where, strays = src_dir(root), {}, []
    for dirpath, _, names in os.walk(d):
        rel = os.path.relpath(dirpath, d)
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            if rel not in RANK:
                strays.append(f"libcore/src/{os.path.normpath(os.path.join(rel, n))} is in no layer folder "
                              f"({', '.join(LAYERS)})")
            elif n in where:
                strays.append(f"libcore/src/{rel}/{n}: libcore/src/{where[n]}/{n} has the same name")
            else:
                where[n] = rel
    return where, strays


def path_of(root, where, name):
    return os.path.join(src_dir(root), where[name], name)


def rel_of(where, name):
    return f"libcore/src/{where[name]}/{name}"


def layer_only(name):
    return name.endswith("_impl.h")


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        return [os.path.basename(m) for m in INCLUDE_RE.findall(fh.read())]


def check(root):
    """Returns (breaches, notes): lists of strings."""
    breaches, notes, used = [], [], set()
    where, strays = scan(root)
    breaches += strays
    private = set(f for f in where if f.endswith(".h")) - PUBLIC_FROM_SRC
    public_funcs, private_funcs = set(), {}
    for h in sorted(f for f in where if f.endswith(".h")):
        with open(path_of(root, where, h), encoding="utf-8", errors="replace") as fh:
            names = FUNC_NAME_RE.findall(strip_c(fh.read()))
        if h in PUBLIC_FROM_SRC:
            public_funcs.update(names)
        else:
            for fn in names:
                private_funcs.setdefault(fn, rel_of(where, h))
    for fn in public_funcs:
        private_funcs.pop(fn, None)
    for f in sorted(where):
        lf = where[f]
        if lf == "transport":
            with open(path_of(root, where, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for no, line in enumerate(text.splitlines(), 1):
                m = KIND_RE.search(line)
                if m:
                    breaches.append(f"{rel_of(where, f)}:{no} (transport) names a lock kind "
                                    f"({m.group(0)}): the engine decides per kind, or the api "
                                    f"layer passes the fact in")
        for inc in includes(path_of(root, where, f)):
            if inc not in where:
                continue  # system, public (hilock.h) or generated
            li = where[inc]
            if layer_only(inc) and li != lf:
                breaches.append(f"{rel_of(where, f)} ({lf}) includes {inc}, which only {li} files may")
                continue
            if RANK[li] > RANK[lf]:
                if (f, inc) in UPWARD_ALLOWED:
                    used.add(("up", f, inc))
                    continue
                breaches.append(f"{rel_of(where, f)} ({lf}) includes {inc} ({li}, a layer above)")
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
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = strip_c(fh.read())
                for fn in PROTO_RE.findall(text):
                    if fn not in private_funcs:
                        continue
                    if (rel, fn) in DECLARED_ALLOWED:
                        used.add(("decl", rel, fn))
                        continue
                    breaches.append(f"{rel} declares libcore's private function {fn} "
                                    f"({private_funcs[fn]}) itself")
    for f, inc in sorted(UPWARD_ALLOWED):
        if ("up", f, inc) not in used:
            notes.append(f"allow-list entry ({f}, {inc}) matches nothing any more: remove it")
    for f, inc in sorted(OUTSIDE_ALLOWED):
        if ("out", f, inc) not in used:
            notes.append(f"allow-list entry ({f}, {inc}) matches nothing any more: remove it")
    for f, fn in sorted(DECLARED_ALLOWED):
        if ("decl", f, fn) not in used:
            notes.append(f"allow-list entry ({f}, {fn}) matches nothing any more: remove it")
    return breaches, notes


def dot(root):
    """The layers as Graphviz: per layer folder its headers and one node for
    its source files (named by the folder, so adding a .c file does not change
    the picture; adding a header does); an edge where a layer's sources or a
    header include a header; red where that goes upward (allow-listed debt)."""
    where, _ = scan(root)
    headers = sorted(f for f in where if f.endswith(".h"))
    out = ["// Generated by scripts/layers.py dot; tests/lint checks it is current.",
           "// libcore's layers (top = api), one folder each: headers, and which includes which.",
           "digraph libcore {",
           "  rankdir=TB; newrank=true; node [shape=box, fontname=Helvetica, fontsize=10];",
           "  edge [color=gray40]; compound=true;"]
    for layer in reversed(LAYERS):
        out.append(f"  subgraph cluster_{layer} {{")
        out.append(f'    label="libcore/src/{layer}/"; style=rounded; color=gray60; fontname=Helvetica;')
        out.append(f'    "{layer} sources" [label="{layer}/*.c", shape=note];')
        for f in headers:
            if where[f] == layer:
                fill = "lightpink" if layer_only(f) else "lightyellow"
                out.append(f'    "{f}" [style=filled, fillcolor={fill}];')
        out.append("  }")
    edges = set()
    for f in where:
        src = f if f.endswith(".h") else f"{where[f]} sources"
        for inc in includes(path_of(root, where, f)):
            if inc in where and inc.endswith(".h") and inc != f:
                edges.add((src, inc, RANK[where[inc]] > RANK[where[f]]))
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
    where, _ = scan(root)
    cfiles = sorted(f for f in where if f.endswith(".c"))
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
    per_layer = {layer: [0, 0] for layer in LAYERS}  # files, lines
    for f in where:
        with open(path_of(root, where, f), encoding="utf-8", errors="replace") as fh:
            per_layer[where[f]][0] += 1
            per_layer[where[f]][1] += sum(1 for _ in fh)
    funcs = []
    defined = {}  # public function -> file
    for f in cfiles:
        for name, line, n, public in functions(path_of(root, where, f)):
            funcs.append((n, name, f"{rel_of(where, f)}:{line}"))
            if public:
                defined[name] = f
    funcs.sort(reverse=True)
    # calls between files of different layers
    down = up = 0
    up_sites = []
    api_types = re.compile(r"\b(?:struct\s+)?hilock_(?:client|lock|rwlock|multilock)\b")
    struct_refs = []
    for f in sorted(where):
        with open(path_of(root, where, f), encoding="utf-8", errors="replace") as fh:
            text = strip_c(fh.read())
        lf = RANK[where[f]]
        if f.endswith(".h"):
            if lf < RANK["api"]:
                struct_refs += [f"{rel_of(where, f)}:{ln}" for ln, line in
                                enumerate(text.split("\n"), 1) if api_types.search(line)]
            continue
        own = {n for n, *_ in functions(path_of(root, where, f))}
        for ln, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"\b([a-z_]\w*)\s*\(", line):
                name = m.group(1)
                g = defined.get(name)
                if not g or g == f or name in own:
                    continue
                lg = RANK[where[g]]
                if lg == lf:
                    continue
                if lg > lf:
                    up += 1
                    up_sites.append(f"{rel_of(where, f)}:{ln} {name} ({g})")
                else:
                    down += 1
            if lf < RANK["api"] and api_types.search(line):
                struct_refs.append(f"{rel_of(where, f)}:{ln}")
    return sizes, per_layer, funcs, down, up, up_sites, struct_refs


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
    sizes, per_layer, funcs, down, up, up_sites, struct_refs = stats(root)
    print("lines per layer (.c and .h):")
    for layer in LAYERS:
        n_files, n_lines = per_layer[layer]
        print(f"  {n_lines:6d}  libcore/src/{layer}/ ({n_files} files)")
    print(f"  {sum(v[1] for v in per_layer.values()):6d}  libcore/src/")
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
