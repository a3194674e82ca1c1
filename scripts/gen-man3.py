#!/usr/bin/env python3
"""Generate the man3 pages of the C API from libcore/include/hilock.h.

    scripts/gen-man3.py HEADER OUTDIR [VERSION]

Writes OUTDIR/hilock.3 (conventions, error codes, types, and every function
by section) and one page per group of declarations: the functions declared
together under one comment share a page named after the first, and each
other name gets a one-line `.so` page pointing to it (as libgit2/OpenSSL do).
The header's comments are the text, so the pages stay true to hilock.h.
Only the standard library; no output depends on the date or the machine.
"""

import os
import re
import sys

API = re.compile(r"^\s*HILOCK_API\s+(.*)$")


def esc(text):
    """Text for a roff line: backslashes, and a leading dot or quote."""
    out = text.replace("\\", "\\e")
    # non-ASCII as groff escapes: the pages are plain ASCII
    out = "".join(c if ord(c) < 128 else ("\\(em" if c == "\u2014" else "\\[u%04X]" % ord(c))
                  for c in out)
    if out.startswith((".", "'")):
        out = "\\&" + out
    return out


def clean_comment(raw):
    """The text of a /* ... */ comment, one string per line, stars removed."""
    body = raw.strip()
    body = body[2:] if body.startswith("/*") else body
    body = body[:-2] if body.endswith("*/") else body
    lines = []
    for ln in body.split("\n"):
        ln = re.sub(r"^\s*\* ?", "", ln.rstrip()) if ln.strip().startswith("*") else ln.strip()
        lines.append(ln.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def parse(path):
    """[(kind, payload)] in header order: ('section', title),
    ('group', (comment_lines, [decl, ...])), ('code', text)."""
    src = open(path, encoding="utf-8").read()
    lines = src.split("\n")
    items = []
    i = 0
    comment = None          # the comment right above the current line
    group = None            # the group being filled
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s.startswith("/*"):
            j = i
            while "*/" not in lines[j]:
                j += 1
            raw = "\n".join(lines[i:j + 1])
            i = j + 1
            text = clean_comment(raw)
            # "/* ---- */ /* Title */ /* ---- */" banners name a section
            if text and all(re.fullmatch(r"-+", t.strip() or "-") for t in text):
                comment = None
                group = None
                continue
            if len(text) == 1 and i < len(lines) and lines[i].strip().startswith("/* ---"):
                items.append(("section", text[0].strip()))
                comment = None
                group = None
                continue
            comment = text
            group = None
            continue
        if not s:
            comment = None
            group = None
            i += 1
            continue
        m = API.match(line)
        if m:
            decl = m.group(1)
            while not decl.rstrip().endswith(";"):
                i += 1
                decl += " " + lines[i].strip()
            decl = re.sub(r"\s+", " ", decl).strip()
            if group is None:
                group = (comment or [], [])
                items.append(("group", group))
                comment = None
            group[1].append(decl)
            i += 1
            continue
        # other code (typedefs, enums, structs, macros): kept for hilock(3)
        if (s.startswith(("typedef", "enum", "#define HILOCK_", "struct"))
                and not re.match(r"#define HILOCK_(H|API)\b", s)):
            j = i
            text = [line]
            depth = line.count("{") - line.count("}")
            while (depth > 0 or (text[-1].rstrip().endswith("\\"))
                   or (s.startswith("typedef") and not text[-1].rstrip().endswith(";")
                       and depth == 0 and "{" not in text[-1])) and j + 1 < len(lines):
                j += 1
                text.append(lines[j])
                depth += lines[j].count("{") - lines[j].count("}")
            items.append(("code", (comment or [], "\n".join(text))))
            i = j + 1
            comment = None
            group = None
            continue
        comment = None      # #ifdef, extern "C", ...: the comment was not about us
        group = None
        i += 1
    return items


def func_name(decl):
    m = re.search(r"\b(hilock_\w+)\s*\(", decl)
    return m.group(1) if m else None


def summary(comment, names):
    """The NAME line's description: the comment's first sentence, short."""
    text = " ".join(t.strip() for t in comment if t.strip())
    if not text:
        return "part of the hilock C API"
    first = re.split(r"(?<=[.:;])\s", text, maxsplit=1)[0].rstrip(".:;")
    if len(first) > 90:
        first = first[:87].rsplit(" ", 1)[0] + "..."
    return first[0].lower() + first[1:] if first[:1].isupper() and not first[:2].isupper() else first


def paragraphs(comment):
    """Comment lines to roff: blank lines split paragraphs, indented or list
    lines are kept as they are (no fill)."""
    out = []
    block = []
    for ln in comment + [""]:
        if not ln.strip():
            if block:
                if any(b.startswith(("  ", "-", "\t")) for b in block):
                    out += [".PP", ".nf"] + [esc(b) for b in block] + [".fi"]
                else:
                    out += [".PP"] + [esc(b.strip()) for b in block]
                block = []
            continue
        block.append(ln)
    return out


def header(title, version):
    return ['.\\" Generated by scripts/gen-man3.py from hilock.h; do not edit.',
            '.TH %s 3 "" "hilock %s" "hilock Manual"' % (title.upper(), version)]


def synopsis(decls):
    out = [".SH SYNOPSIS", ".nf", ".B #include <hilock.h>", ".PP"]
    for d in decls:
        out.append(esc(d))
    out += [".fi", ".PP", "Link with \\fI\\-lhilock\\fP "
            "(\\fBpkg\\-config \\-\\-cflags \\-\\-libs hilock\\fP)."]
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    header_path, outdir = argv[1], argv[2]
    src = open(header_path, encoding="utf-8").read()
    version = argv[3] if len(argv) > 3 else re.search(
        r'#define HILOCK_VERSION_STRING "([^"]+)"', src).group(1)
    top = clean_comment(re.match(r"\s*(/\*.*?\*/)", src, re.S).group(1))
    items = parse(header_path)
    os.makedirs(outdir, exist_ok=True)
    written = []

    def write(name, lines):
        with open(os.path.join(outdir, name + ".3"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        written.append(name)

    index = []       # (section, [page names])
    section = "General"
    codes = []
    for kind, payload in items:
        if kind == "section":
            section = payload
            continue
        if kind == "code":
            codes.append((section, payload))
            continue
        comment, decls = payload
        names = [n for n in (func_name(d) for d in decls) if n]
        if not names:
            continue
        page = names[0]
        lines = header(page, version)
        lines += [".SH NAME", "%s \\- %s" % (", ".join(names), esc(summary(comment, names)))]
        lines += synopsis(decls)
        lines += [".SH DESCRIPTION"]
        lines += paragraphs(comment) if comment else [
            ".PP", "See the declaration above and \\fBhilock\\fP(3) for the conventions."]
        if any(re.match(r"int\s", d) for d in decls):
            lines += [".SH RETURN VALUE", ".PP",
                      "Functions returning \\fBint\\fP return 0 (\\fBHILOCK_OK\\fP) or a "
                      "negative \\fBHILOCK_E*\\fP code (\\fBhilock_strerror\\fP() describes "
                      "it); the handle keeps a detail message."]
        lines += [".SH SEE ALSO", ".BR hilock (3)"]
        write(page, lines)
        for other in names[1:]:
            with open(os.path.join(outdir, other + ".3"), "w", encoding="utf-8") as f:
                f.write(".so man3/%s.3\n" % page)
            written.append(other)
        if not index or index[-1][0] != section:
            index.append((section, []))
        index[-1][1].extend(names)

    lines = header("hilock", version)
    lines += [".SH NAME", "hilock \\- Redis distributed locks in Redisson's data layout (C API)"]
    lines += [".SH SYNOPSIS", ".nf", ".B #include <hilock.h>", ".fi", ".PP",
              "Link with \\fI\\-lhilock\\fP "
              "(\\fBpkg\\-config \\-\\-cflags \\-\\-libs hilock\\fP)."]
    lines += [".SH DESCRIPTION"] + paragraphs(top)
    lines += [".SH TYPES AND CONSTANTS"]
    for _, (comment, code) in codes:
        if comment:
            lines += paragraphs(comment)
        lines += [".PP", ".nf"] + [esc(c) for c in code.split("\n")] + [".fi"]
    lines += [".SH FUNCTIONS"]
    for sec, names in index:
        lines += [".SS %s" % esc(sec), ".nf"]
        for n in names:
            lines += ["\\fB%s\\fP(3)" % n]
        lines += [".fi"]
    lines += [".SH SEE ALSO", ".BR hilock (1)",
              ".PP", "The project's docs/c-api.md and examples/ (each lock kind, the "
              "watchdog and its loss callback, multi-lock and Redlock)."]
    write("hilock", lines)
    print("gen-man3: %d pages in %s" % (len(written), outdir))


if __name__ == "__main__":
    main(sys.argv)
