"""The product docs name only what exists, checked instead of claimed.

The product docs are README.md, kdc-plugin/README.md, deploy/THREE-HOSTS.md,
docs/*.md, docs/design/*.md and docs/security/*.md; the bench log
(docs/bench-log.md), its archive (docs/bench-archive/) and the dated
reviews (docs/reviews/) record the past as it was and are not checked. In
the product docs:

- krb5 patches: every patch number (0001-0099) comes with its name, either
  as the start of its file name in krb5-patches/series (`0006-Add-aes128`,
  enough words to name one patch) or as a row of docs/krb5-patches.md's
  table (`| 0006 | Add aes128-ctr-mpc and aes256-ctr-mpc enctypes |`); the
  number must be the one the series gives that name today. The series is
  read when the test runs, so a renumbered series fails every doc that
  still cites the old numbers. docs/krb5-patches.md's table lists the
  whole series in order, and its count of patches is the series'.
- Paths: every repository path (a backticked or linked file or folder, or
  a path starting with one of the repository's top-level folders) exists;
  a fragment (`kmpc_harness/replica.py`, `batch_step.cc`) must end some
  path of the repository. Paths of the krb5 tree (`src/kdc/kdc_mpc_as.c`,
  `do_as_req.c`) must exist in the patched tree `make krb5` leaves in
  build/krb5-src (skipped when it is absent).
- Options: every `--option` is defined by one of kmpc's programs (ABSL_FLAG,
  getopt_long tables, argparse add_argument, kmpc-admin's parser or CLI11's
  add_option/add_flag, shell case labels), or is another program's, listed
  in EXTERNAL_OPTIONS.
- Make targets: every backticked or fenced `make TARGET` is a target of
  the Makefile (or krb5's, in KRB5_MAKE_TARGETS).
- Metrics: every `kmpc_*` name that is not a file, module or library is a
  Prometheus metric the servers or the KDC module define (a metric's
  histogram series and `kmpc_foo_*` families included).
- No issue numbers (the docs say what is, the tracker how it came to be).
- Sections: a doc named with a quoted section (`docs/security-model.md,
  "Freshness of the gate"`, `admin-guide.md ("After a compromise")`) has a
  heading, or a paragraph's or item's bold lead, holding that text.
- docs/design/README.md lists every design doc; docs/design/architecture.md's
  folder table names every folder of kdc-plugin/src and mpc-server/src.
- README.md has at most README_MAX_LINES lines, and docs/security-model.md
  at most SECURITY_MODEL_MAX_LINES (the mechanisms live in docs/security/).
- Figures: README.md's figures table and docs/benchmarks.md's tables of
  today's figures name the bench results they come from (a results JSON
  kept in docs/bench-archive/), and every figure in them is that JSON's
  value, rounded as the doc rounds it. Each row is keyed by its first cell
  in FIGURES, which gives the JSON value behind each figure of each value
  column in order (target columns are not figures); a row the JSON does not
  hold is in UNCHECKED_FIGURE_ROWS with the reason. A row in neither fails.

Each check is a function on a tree, also run here on a small tree with a
planted stale reference, so a check that passes everything is caught.
"""
import fnmatch
import glob
import json
import os
import re
import subprocess

import pytest

from kmpc_paths import BUILD, ROOT

README_MAX_LINES = 250
SECURITY_MODEL_MAX_LINES = 600
KRB5_SRC = os.environ.get("KMPC_KRB5_SRC", os.path.join(BUILD, "krb5-src"))
# Docs that record the past as it was: {path or folder: why}.
LOGS = {
    "docs/bench-log.md": "the log of benchmark runs: the patch numbers, "
    "options and files of each run's day",
    "docs/bench-archive": "earlier runs of the bench log, verbatim",
    "docs/reviews": "dated security reviews, kept as written on their day",
}
# The product docs: these files and every match of these patterns.
PRODUCT_DOCS = ("README.md", "kdc-plugin/README.md", "deploy/THREE-HOSTS.md")
PRODUCT_DOC_GLOBS = ("docs/*.md", "docs/design/*.md", "docs/security/*.md")
TOP_DIRS = ("krb5-patches", "kdc-plugin", "mpc-server", "proto", "deploy",
            "integration-tests", "docs")
# Paths the docs name that are neither the repository's nor krb5's: {path: whose}.
EXTERNAL_PATHS = {
    "debian/patches/kmpc/": "inside Debian's krb5 source package that `make deb` builds",
    "src/core/tsi/ssl_transport_security.cc": "gRPC's source",
    "kmpc/": "a folder `make deb` leaves in build/deb/ (deploy/THREE-HOSTS.md)",
    "krb5-work/": "a folder `make deb` leaves in build/deb/",
    "cache/": "a folder `make deb` leaves in build/deb/",
    "next/": "a folder `make deb` leaves in build/deb/",
    "ca-private/": "the PKINIT CA's folder deploy/gen-pkinit-certs.sh writes",
}
# Options of programs that are not kmpc's: {option: whose}.
EXTERNAL_OPTIONS = {
    "--with-ldap": "krb5's configure (kldap)",
    "--output-on-failure": "ctest",
    "--build": "cmake",
    "--install": "cmake",
    "--component": "cmake --install",
    "--target": "pip install",
    "--require-hashes": "pip install",
    "--no-deps": "pip install",
    "--help": "every program",
    "--fixup": "git commit",
    "--autosquash": "git rebase",
    "--onto": "git rebase",
    "--numstat": "git diff",
    "--helpfull": "abseil's flags library",
    "--flagfile": "abseil's flags library",
    "--v": "abseil's logging",
    "--vmodule": "abseil's logging",
    "--minloglevel": "abseil's logging",
    "--stderrthreshold": "abseil's logging",
    "--negotiate": "curl (SPNEGO)",
    "--exclude-libs": "GNU ld (kdc-plugin/README.md)",
    "--now": "systemctl enable",
    "--no-install-recommends": "apt-get install",
    "--system": "adduser",
    "--group": "adduser",
    "--no-create-home": "adduser",
    "--home": "adduser",
    "--name": "abseil's flag file form, `--name=value`",
}
# Targets of krb5's own makefiles the docs name: {target: where}.
KRB5_MAKE_TARGETS = {
    "check": "MIT's `make check` in the krb5 build tree (build/krb5-obj)",
}
# kmpc_* names that are neither metrics nor files: {name: what}.
NOT_METRICS = {
    "kmpc_core": "the CMake library of the server's core",
    "kmpc_key_kind": "the KDB string attribute the key dealer reads",
}
SOURCE_EXTS = (".c", ".cc", ".h", ".inc", ".py", ".proto", ".sh", ".cmake", ".rst",
               ".exports", ".md", ".service", ".patch")
NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
for _t, _tw in ((20, "twenty"), (30, "thirty"), (40, "forty")):
    NUMBER_WORDS[_tw] = _t
    for _u in range(1, 10):
        NUMBER_WORDS[f"{_tw}-{list(NUMBER_WORDS)[_u]}"] = _t + _u


# ---- reading ----------------------------------------------------------------

def _read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def product_docs(root):
    """PRODUCT_DOCS and PRODUCT_DOC_GLOBS' files but the logs, relative."""
    out = list(PRODUCT_DOCS) + sorted(
        os.path.relpath(p, root) for pat in PRODUCT_DOC_GLOBS
        for p in glob.glob(os.path.join(root, pat)))
    return [p for p in out if os.path.exists(os.path.join(root, p))
            and not any(p == log or p.startswith(log + "/") for log in LOGS)]


def doc_lines(root, docs):
    """(doc, line number, line) of every line of docs."""
    for doc in docs:
        for n, line in enumerate(_read(os.path.join(root, doc)).splitlines(), 1):
            yield doc, n, line


def code_spans(line):
    """The backticked spans of a markdown line."""
    return re.findall(r"`([^`]+)`", line)


def series(root):
    """krb5-patches/series: [(number, slug)] in order, e.g. ('0006',
    'Add-aes128-ctr-mpc-and-aes256-ctr-mpc-enctypes')."""
    out = []
    for line in _read(os.path.join(root, "krb5-patches", "series")).splitlines():
        m = re.match(r"(\d{4})-(.+)\.patch$", line.strip())
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def tracked(root):
    """Files of the repository (git's, with untracked ones not ignored)."""
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True, check=True)
    return [p for p in out.stdout.splitlines() if os.path.exists(os.path.join(root, p))]


def with_dirs(files):
    """files and every folder above one of them (as 'a/b/')."""
    out = set(files)
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]) + "/")
    return out


# ---- krb5 patches -----------------------------------------------------------

PATCH_REF = re.compile(r"(?<![\w.,])(00\d\d)(?![\d.]\d)(?:-([A-Za-z][A-Za-z0-9-]*))?")


def _slugify(subject):
    """A subject as git format-patch names its file (before the cut)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", subject).strip("-")


def _slug_matches(cited, slug):
    """cited (words of a patch's name, or its whole subject) names slug:
    cited's words start slug's, or cited starts with slug where git
    format-patch cut a long subject."""
    c, s = cited.lower().strip("-"), slug.lower().strip("-")
    if s.startswith(c) and (len(c) == len(s) or s[len(c)] == "-"):
        return True
    return len(s) >= 40 and c.startswith(s)


def _table_subject(line, number):
    """The subject cell of a table row '| number | subject | ...'."""
    m = re.match(r"\s*\|\s*" + number + r"\s*\|([^|]*)\|", line)
    return m.group(1).strip().strip("*") if m else None


def _named(number, cited, entries):
    """None if cited (words of a patch name) names the patch `number` of
    entries and no other; else what is wrong."""
    fits = [(n, s) for n, s in entries if _slug_matches(cited, s)]
    if len(fits) > 1:
        return (f"`{number}-{cited}` fits {', '.join(n + '-' + s for n, s in fits)}: "
                "give more of the name")
    if not fits:
        return f"no patch in krb5-patches/series is named {cited}"
    n, s = fits[0]
    if n != number:
        return f"{cited} is {n}-{s}.patch in krb5-patches/series, not {number}"
    return None


def stale_patch_refs(root, docs):
    """'doc:line: ...' for every patch number cited without its name, or
    with a name the series gives another number (or none)."""
    entries = series(root)
    numbers = dict(entries)
    found = []
    for doc, n, line in doc_lines(root, docs):
        for m in PATCH_REF.finditer(line):
            number, cited = m.group(1), m.group(2)
            where = f"{doc}:{n}"
            if cited is None:
                cited = _table_subject(line, number) if m.start() < line.find("|", 1) else None
                if cited is None:
                    hint = f" (`{number}-{numbers[number]}`?)" if number in numbers else ""
                    found.append(f"{where}: patch number {number} without its name: cite "
                                 f"it as the start of its file name in krb5-patches/series"
                                 f"{hint}")
                    continue
                cited = _slugify(cited)
            problem = _named(number, cited, entries)
            if problem:
                found.append(f"{where}: {problem}")
    return found


def patch_table_drift(root, doc="docs/krb5-patches.md"):
    """doc's table rows against the series, in order, and its count."""
    entries = series(root)
    text = _read(os.path.join(root, doc)).splitlines()
    rows = [(n, m.group(1)) for n, line in enumerate(text, 1)
            for m in [re.match(r"\|\s*(\d{4})\s*\|", line)] if m]
    found = []
    listed = [r for _, r in rows]
    want = [n for n, _ in entries]
    if listed != want:
        missing = [w for w in want if w not in listed]
        extra = [r for r in listed if r not in want]
        found.append(f"{doc}: the table lists {len(listed)} patches, the series "
                     f"{len(want)}; missing {missing or 'none'}, not in the series "
                     f"{extra or 'none'}" + ("" if missing or extra else ", out of order"))
    for n, line in enumerate(text, 1):
        m = re.match(r"([A-Z][a-z]+(?:-[a-z]+)?) patches\b", line)
        if m and NUMBER_WORDS.get(m.group(1).lower(), len(entries)) != len(entries):
            found.append(f"{doc}:{n}: says {m.group(1)} patches, the series has "
                         f"{len(entries)}")
    return found


# ---- paths ------------------------------------------------------------------

PATH_CHARS = re.compile(r"^[\w.*{},+@/-]+$")
BARE_TOP = re.compile(r"(?<![\w/.`-])((?:%s)/[\w./*{},+@-]*)" % "|".join(TOP_DIRS))


def _expand(path):
    """a{b,c}d -> [abd, acd]."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [e for alt in m.group(1).split(",")
            for e in _expand(path[:m.start()] + alt + path[m.end():])]


def _clean(token):
    token = re.sub(r"[.,;:)]+$", "", token.split("#")[0])
    token = re.sub(r":\d+(-\d+)?$", "", token)
    return token


def path_candidates(line, doc):
    """(path, relative_to_doc) named in a line: backticked tokens that look
    like paths, link targets and bare paths under a top-level folder."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", line):
        if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
            out.append((_clean(target), True))
    spans = code_spans(line)
    for span in spans:
        for tok in span.split():
            tok = _clean(tok)
            if not PATH_CHARS.match(tok) or tok.startswith(("-", "/")):
                continue
            first = _expand(tok)[0]
            looks = ("/" in tok and (tok.split("/")[0] in TOP_DIRS + ("src",) or
                                     first.endswith("/") or first.endswith(SOURCE_EXTS)))
            if looks or ("/" not in tok and first.endswith(SOURCE_EXTS)):
                out.append((tok, False))
    unquoted = re.sub(r"`[^`]*`|\]\([^)]*\)", " ", line)
    out += [(_clean(m), False) for m in BARE_TOP.findall(unquoted)]
    return [(p, rel) for p, rel in out
            if p and not re.search(r"[A-Z]{2,}/|^build/|(^|/)NNNN-", p)]


def _exists(path, repo, krb5):
    """Whether path (a '*' glob, folders ending in '/') names something of
    repo (a set of paths and folders), or of krb5 when that is given."""
    pat = re.compile("(^|/)" + re.escape(path).replace(r"\*", "[^/]*") +
                     ("" if path.endswith("/") else "/?") + "$")
    if path.split("/")[0] in TOP_DIRS:
        pat = re.compile("^" + pat.pattern[len("(^|/)"):])
        return any(pat.search(p) for p in repo)
    if path.startswith("src/") and krb5 is not None:
        return any(pat.search(p) for p in krb5 if p.startswith("src/"))
    return any(pat.search(p) for p in repo) or (krb5 is not None and
                                                any(pat.search(p) for p in krb5))


def krb5_tree(src=KRB5_SRC):
    """The patched krb5 tree's paths (with folders), or None without it."""
    if not os.path.isdir(os.path.join(src, ".git")):
        return None
    out = subprocess.run(["git", "-C", src, "ls-files"], capture_output=True, text=True)
    return with_dirs(out.stdout.splitlines()) if out.returncode == 0 else None


def _in_home(doc, path, repo):
    """Whether path names a file or folder of doc's own component folder
    (`src/router.h` in kdc-plugin/README.md); docs/ is no component."""
    home = os.path.dirname(doc)
    if home.split("/")[0] not in TOP_DIRS or home.split("/")[0] == "docs":
        return False
    return _exists(home + "/" + path, repo, None)


def missing_paths(root, docs, krb5=None):
    """'doc:line: path ...' for every path named in docs that does not
    exist. krb5=None: links and paths under a top-level folder of the
    repository; else (the patched krb5 tree's paths) also fragments of
    paths (`kmpc_harness/replica.py`, `batch_step.cc`, `do_as_req.c`) and
    paths of the krb5 tree (`src/kdc/...`), which must end a path of
    either tree."""
    repo = with_dirs(tracked(root))
    found = []
    for doc, n, line in doc_lines(root, docs):
        for path, relative in path_candidates(line, doc):
            if relative:
                full = os.path.normpath(os.path.join(os.path.dirname(doc), path))
                if (krb5 is None and not full.startswith("..") and
                        not os.path.exists(os.path.join(root, full))):
                    found.append(f"{doc}:{n}: the link {path} leads nowhere ({full})")
                continue
            for p in _expand(path):
                top = p.split("/")[0] in TOP_DIRS
                if top != (krb5 is None) or p in EXTERNAL_PATHS or _in_home(doc, p, repo):
                    continue
                if not _exists(p, repo, krb5):
                    where = ("the patched krb5 tree" if p.startswith("src/") else
                             "the repository" if top else "the repository or the krb5 tree")
                    found.append(f"{doc}:{n}: {p}: no such file or folder in {where}")
    return found


# ---- options ----------------------------------------------------------------

OPTION_DEFS = (
    (r"ABSL_FLAG\(\s*([\w:<>]+)\s*,\s*(\w+)\s*,", (".cc",)),
    (r'\{\s*"([a-z][\w-]*)"\s*,\s*(?:required|no|optional)_argument', (".c", ".cc")),
    (r'add_argument\(([^)]*)\)', (".py",)),
    (r'\bname == "([a-z][\w-]*)"', (".cc",)),
    (r'kValued = \{([^}]*)\}', (".cc",)),
    (r'\badd_(?:option|flag)\(\s*"([^"]+)"', (".cc",)),
    (r'^\s*(--[a-z][\w-]*)(?:=\*)?(?:\|[^)]*)?\)', (".sh",)),
)


def defined_options(root):
    """Every long option kmpc's programs and scripts define."""
    out = set()
    for path in tracked(root):
        if "/test/" in path or path.endswith("_test.cc") or "/test_" in path:
            continue
        text = None
        for rx, exts in OPTION_DEFS:
            if not path.endswith(exts):
                continue
            text = text if text is not None else _read(os.path.join(root, path))
            for m in re.finditer(rx, text, re.MULTILINE):
                if rx.startswith("ABSL"):
                    out.add("--" + m.group(2))
                    if m.group(1) == "bool":
                        out.add("--no" + m.group(2))
                elif rx.startswith("add_arg"):
                    out.update(re.findall(r'"(--[\w-]+)"', m.group(1)))
                elif rx.startswith(r"\badd_"):
                    out.update(re.findall(r"--[\w-]+", m.group(1)))
                elif rx.startswith("kValued"):
                    out.update("--" + v for v in re.findall(r'"([\w-]+)"', m.group(1)))
                elif rx.startswith("^"):
                    out.add(m.group(1))
                else:
                    out.add("--" + m.group(1))
    return out


OPTION_REF = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*[a-z0-9])")


def unknown_options(root, docs, defined):
    """'doc:line: --option ...' for every option named in docs that no
    program defines."""
    found = []
    for doc, n, line in doc_lines(root, docs):
        for opt in OPTION_REF.findall(line):
            if opt not in defined and opt not in EXTERNAL_OPTIONS:
                found.append(f"{doc}:{n}: {opt}: no kmpc program or script defines it "
                             "(nor is it in EXTERNAL_OPTIONS)")
    return found


# ---- make targets -----------------------------------------------------------

def make_targets(root):
    """The Makefile's targets."""
    out = set()
    for line in _read(os.path.join(root, "Makefile")).splitlines():
        m = re.match(r"^([\w][\w .-]*?)\s*:(?!=)", line)
        if m:
            out.update(m.group(1).split())
    return out


def unknown_make_targets(root, docs):
    """'doc:line: make X ...' for every backticked or fenced `make X`
    whose X is no target."""
    targets = make_targets(root)
    found = []
    for doc in docs:
        fenced = span_open = False
        for n, line in enumerate(_read(os.path.join(root, doc)).splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            # A span that a line break cuts goes on from the line before.
            text = "`" + line if span_open and not fenced else line
            span_open = not fenced and text.count("`") % 2 == 1
            texts = [line] if fenced else code_spans(text)
            for text in texts:
                for t in re.findall(r"(?:^|[\s;&(])make\s+(?:[A-Z_]+=\S*\s+)*([a-z][\w-]*)",
                                    text):
                    if t not in targets and t not in KRB5_MAKE_TARGETS:
                        found.append(f"{doc}:{n}: make {t}: no such target in the Makefile")
    return found


# ---- metrics ----------------------------------------------------------------

def defined_metrics(root):
    """The Prometheus metric names the servers and the KDC module define."""
    out = set()
    for path in tracked(root):
        if not (path.startswith(("mpc-server/src/", "kdc-plugin/src/")) and
                path.endswith((".cc", ".h")) and not path.endswith("_test.cc")):
            continue
        out.update(re.findall(r'"(kmpc_[a-z0-9_]+)', _read(os.path.join(root, path))))
    return out


def code_identifiers(root, files):
    """kmpc_* words of C, C++, CMake and Python code outside string
    literals (functions, fixtures, libraries, test programs), and the test
    programs CMake names after a test file (kmpc_kdc_${_t}_test for
    cts_gate_test.cc)."""
    out = set()
    for path in files:
        m = re.match(r"(\w+)_test\.cc$", os.path.basename(path))
        if m:
            out.update(f"kmpc_{c}_{m.group(1)}_test"
                       for c in ("kdc", "core", "cts", "admin", "dealer", "client", "storm"))
            out.add(f"kmpc_{m.group(1)}_test")
        if path.endswith((".c", ".cc", ".h", ".cmake", "CMakeLists.txt", ".py")):
            text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', _read(os.path.join(root, path)))
            out.update(re.findall(r"\bkmpc_[a-z0-9_]+", text))
    return out


METRIC_REF = re.compile(r"(?<![\w/.-])(kmpc_[a-z0-9_]+\*?)(?![\w/-]|\.[a-z])")


def unknown_metrics(root, docs, metrics):
    """'doc:line: kmpc_x ...' for every kmpc_* name in docs that is no
    metric, file, module or library."""
    files = tracked(root)
    names = {os.path.splitext(os.path.basename(p.rstrip("/")))[0] for p in with_dirs(files)}
    names |= code_identifiers(root, files)
    found = []
    for doc, n, line in doc_lines(root, docs):
        for name in METRIC_REF.findall(line):
            base = name.rstrip("*")
            if name.endswith("*"):
                ok = any(m.startswith(base) for m in metrics)
            else:
                ok = (base in metrics or base in names or base in NOT_METRICS or
                      re.sub(r"_(bucket|sum|count)$", "", base) in metrics)
            if not ok:
                found.append(f"{doc}:{n}: {name}: no metric of that name in "
                             "mpc-server/src or kdc-plugin/src")
    return found


# ---- sections ---------------------------------------------------------------

SECTION_REF = re.compile(r"((?:\.\./)*(?:[\w.-]+/)*[\w.-]+\.md)`?\)?(?:,| ?\(| )\s*\(?\"([^\"]{3,}?)\"")


def _sections(path):
    """A doc's headings and the bold leads of its paragraphs and items."""
    lines = _read(path).splitlines()
    out = [re.sub(r"^#+\s*", "", line) for line in lines if line.startswith("#")]
    out += [m.group(1) for line in lines
            for m in [re.match(r"\s*(?:[-*]\s+|\d+\.\s+)?\*\*([^*]+)\*\*", line)] if m]
    return [re.sub(r"\s+", " ", s).strip().lower() for s in out]


def stale_section_refs(root, docs):
    """'doc:line: ...' for every `x.md, "Section"` whose doc has no such
    section (the doc found relative to the citing doc, to the repository,
    or as the end of one repository path)."""
    files = tracked(root)
    found = []
    for doc in docs:
        # The lines joined, so that a reference may wrap; where each starts.
        flat, starts = "", []
        for line in _read(os.path.join(root, doc)).splitlines():
            starts.append(len(flat))
            flat += re.sub(r"^\s*(?:[-*>] )?", "", line) + " "
        for m in SECTION_REF.finditer(flat):
            ref, title = m.group(1), m.group(2)
            n = sum(1 for s in starts if s <= m.start())
            cands = [os.path.normpath(os.path.join(os.path.dirname(doc), ref)),
                     os.path.normpath(ref)]
            cands += [p for p in files if "/" not in ref and p.endswith("/" + ref)]
            target = next((c for c in cands if os.path.isfile(os.path.join(root, c))), None)
            if target is None:
                continue  # a doc that does not exist is missing_paths' to report
            want = re.sub(r"\s+", " ", title).strip().lower().rstrip(".")
            if not any(want in s for s in _sections(os.path.join(root, target))):
                found.append(f'{doc}:{n}: {ref}, "{title}": no such section in {target}')
    return found


# ---- figures ----------------------------------------------------------------

# The docs whose figures tables are checked: {doc: the header a table starts
# with}. A table runs to its first line that is not a row.
FIGURE_TABLES = {
    "README.md": "| figure (servers malicious) |",
    "docs/benchmarks.md": "| figure |",
}
RESULTS_REF = re.compile(r"docs/bench-archive/results-[\w.-]+\.json")
# {doc: {row's first cell: [[spec of each figure] of each value column]}}.
# A spec is a JSON path (dots; a step with '*' takes every key or item it
# matches: each value must show as the figure), optionally after words:
# 'ms' (microseconds shown as milliseconds), 'min' or 'max' (of the values);
# or 'PATH / PATH', a ratio.
_RUNS = "mix.kmpc.runs_per_exchange"
_CTS = "cts.modes.%s."
_TGS = "tgs.modes.%s."


def _cts_rows(m):
    c, t = _CTS % m, _TGS % m
    return {
        "kinit p50 / p99, one client": [c + "one_client_p50_ms", c + "one_client_p99_ms",
                                        c + "krbtgt_only_one_client_p50_ms"],
        "kinit -T (FAST) p50 / p99": [c + "fast_p50_ms", c + "fast_p99_ms"],
        "ANDs, AND rounds per login (this realm's reply and request)":
            [c + "ands_per_login", c + "and_rounds_per_login", c + "us_per_and_round*"],
        "cold first login (fresh cluster; two Runs: the reply's shape is proven by the "
        "gate first)": [c + "cold_first_login.ms"],
        "storm peak over TCP, cts / krbtgt-only users":
            [c + "storm_peak_logins_per_s", c + "krbtgt_only_storm_peak_logins_per_s",
             c + "storm_ratio"],
        "CPU per login at the cts storm's saturation (c=256): each server; the KDC":
            ([f"min ms {c}storm_cpu_us_per_login.mpc-server*",
              f"max ms {c}storm_cpu_us_per_login.mpc-server*"] if m == "malicious" else
             [f"ms {c}storm_cpu_us_per_login.mpc-server*"]) +
            [f"ms {c}storm_cpu_us_per_login.krb5kdc",
             f"ms {c}krbtgt_only_storm_cpu_us_per_login.mpc-server*",
             f"ms {c}krbtgt_only_storm_cpu_us_per_login.krb5kdc"],
        "kvno p50 / p99, one client (40 tickets, 8 clients of 2-40 characters in turn)":
            [t + "one_client_p50_ms", t + "one_client_p99_ms", t + "kdb_service_p50_ms"],
        "MPC Runs per TGS (the servers' count; the module's own count: 1)":
            [t + "runs_per_tgs", t + "server_runs", t + "tgs_exchanges"],
        "ANDs, AND rounds per TGS": [t + "ands_per_tgs", t + "and_rounds_per_tgs",
                                     t + "us_per_and_round"],
        "CPU per TGS, one client: each server; the KDC (`/proc`)":
            [f"min {t}cpu_ms_per_tgs.mpc-server*", f"max {t}cpu_ms_per_tgs.mpc-server*",
             t + "cpu_ms_per_tgs.krb5kdc"],
        "cold first ticket per client name length (a compile)":
            [f"min {t}cold_first_tickets_ms*.*", f"max {t}cold_first_tickets_ms*.*",
             t + "cold_first_tickets_failed"],
        "Heimdal's kgetcred, p50 of 8": [t + "heimdal_kgetcred.p50_ms"],
        "mix at 16 clients, TGS to the moved / the KDB-key service":
            [t + "mix.cts.ops_per_s", t + "mix.kdb.ops_per_s", t + "mix_ratio_cts_to_kdb",
             t + "mix.*.failed"],
        "extra CPU of each server per TGS to the moved service, in the mix":
            [f"min ms {t}mix_extra_cpu_us_per_cts_tgs.mpc-server*",
             f"max ms {t}mix_extra_cpu_us_per_cts_tgs.mpc-server*"],
    }


def _two_modes():
    mal, semi = _cts_rows("malicious"), _cts_rows("semi-honest")
    return {row: [mal[row], semi[row]] for row in mal}


FIGURES = {
    "README.md": {
        "MPC Runs per exchange: login, TGS, renewal, forwarding":
            [[_RUNS + ".*.runs_per_exchange"], []],
        "login-storm peak, krbtgt in the cluster":
            [["kmpc_malicious.peak_logins_per_s"], ["stock.peak_logins_per_s"]],
        "users' aes256-cts keys in the cluster: Debian's kinit p50, one client":
            [[_CTS % "malicious" + "one_client_p50_ms", _CTS % "malicious" + "fast_p50_ms"],
             [_CTS % "malicious" + "krbtgt_only_one_client_p50_ms"]],
        "the same users: storm peak over TCP; each server's CPU per login, closed loop of 256":
            [[_CTS % "malicious" + "storm_peak_logins_per_s",
              "ms " + _CTS % "malicious" + "storm_cpu_us_per_login.mpc-server*"], []],
        "a directory-like realm (names of 2-40 characters) / one name length":
            [[_CTS % "malicious" + "realm.ratio_varied_to_uniform",
              _CTS % "malicious" + "realm.*.failed_logins"], []],
        "a service's aes256-cts key in the cluster: Debian's kvno p50, one client; "
        "Runs per TGS":
            [[_TGS % "malicious" + "one_client_p50_ms", _TGS % "malicious" + "runs_per_tgs"],
             [_TGS % "malicious" + "kdb_service_p50_ms"]],
    },
    "docs/benchmarks.md": {
        "one client p50 / p99: login (AS with PAC), TGS-REQ, renewal":
            [[f"ms mix_one_client.{side}.by_op.{op}.step_{q}_us"
              for side, op, q in [("kmpc", op, q) for op in ("login", "tgs", "renew")
                                  for q in ("p50", "p99")] +
              [("stock", op, "p50") for op in ("login", "tgs", "renew")]]],
        "MPC Runs per exchange, the KDC module's count in the 16-client mix":
            [[f"{_RUNS}.{k}.runs_per_exchange" for k in ("as", "tgs", "renew", "forward")] +
             [f"{_RUNS}.{k}.exchanges" for k in ("as", "tgs", "renew", "forward")] +
             [_RUNS + ".*.plan_misses"]],
        "login-storm peak, kmpc / stock":
            [["kmpc.peak_logins_per_s", "stock.peak_logins_per_s",
              "stock.peak_logins_per_s_before_kmpc", "stock.peak_logins_per_s_after_kmpc",
              "ratio"]],
        "login + TGS + renewal + forwarding mix, 16 / 64 clients, kmpc / stock":
            [["mix.kmpc.ops_per_s", "mix.stock.ops_per_s", "mix.ratio",
              "mix_closed_loop_64.kmpc.ops_per_s", "mix_closed_loop_64.stock.ops_per_s",
              "mix_closed_loop_64.ratio", "mix*.*.failed"]],
        "KDC CPU per login at saturation, kmpc / stock":
            [["kmpc.cpu_us_per_login_at_saturation.krb5kdc",
              "stock.cpu_us_per_login_at_saturation.krb5kdc",
              "kmpc.cpu_us_per_login_at_saturation.krb5kdc / "
              "stock.cpu_us_per_login_at_saturation.krb5kdc"]],
        "p99 at 90% of the peak": [["kmpc.p99_ms_at_90pct"]],
        "MPC AES-128, 100,000-block batch":
            [["mpc_microbench.aes128_100k_blocks_per_s_best",
              "mpc_microbench.aes128_bytes_per_block_per_party",
              "mpc_microbench.aes128_single_block_p50_ms"]],
        "malicious / semi-honest: AES-128 100,000 blocks":
            [["mpc_microbench.malicious.ratio_100k_blocks_per_s",
              "mpc_microbench.malicious.aes128_100k_blocks_per_s_best",
              "mpc_microbench.malicious.ratio_bytes_per_block*"]],
        "malicious / semi-honest: one block p50; login-storm peak":
            [["mpc_microbench.malicious.ratio_single_block_p50",
              "mpc_microbench.malicious.aes128_single_block_p50_ms",
              "mpc_microbench.aes128_single_block_p50_ms", "ratio_malicious_to_kmpc",
              "kmpc_malicious.peak_logins_per_s", "kmpc.peak_logins_per_s"]],
        **_two_modes(),
    },
}
# Rows of those tables whose figures results.json does not hold: {(doc, row): why}.
UNCHECKED_FIGURE_ROWS = {
    ("docs/benchmarks.md", "soak, 3 x 60 s at 90% of the peak (2,678/s)"):
        "the soak's per-run memory judgement is in build/bench/soak.json's samples",
    ("docs/benchmarks.md", "two KDCs (primary + replica) against one cluster, peak"):
        "build/bench/replicas.json, which results.json does not carry",
}
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\d)")


def _json_values(data, path):
    """The numbers at a dotted path of data ('*' steps match keys or items)."""
    nodes = [data]
    for step in path.split("."):
        nxt = []
        for node in nodes:
            if "*" in step:
                items = (node.items() if isinstance(node, dict) else
                         enumerate(node) if isinstance(node, list) else ())
                nxt += [v for k, v in items if fnmatch.fnmatch(str(k), step)]
            elif isinstance(node, dict) and step in node:
                nxt.append(node[step])
        nodes = nxt
    return [v for v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _spec_values(data, spec):
    """The values a spec gives (each must show as the figure)."""
    if " / " in spec:
        a, b = (_json_values(data, s.strip()) for s in spec.split(" / "))
        return [a[0] / b[0]] if len(a) == 1 and len(b) == 1 and b[0] else []
    *words, path = spec.split()
    vals = [v / 1000 if "ms" in words else v for v in _json_values(data, path)]
    if vals and "min" in words:
        return [min(vals)]
    if vals and "max" in words:
        return [max(vals)]
    return vals


def _figure_tables(text, header):
    """(line number, row's cells) of the rows of every table whose header
    line starts with header, and the value columns' indexes per table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(header):
            continue
        heads = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        cols = [j for j, h in enumerate(heads) if j > 0 and not h.startswith("target")]
        for n in range(i + 2, len(lines)):
            if not lines[n].startswith("|"):
                break
            yield n + 1, [c.strip() for c in lines[n].strip().strip("|").split("|")], cols


def wrong_figures(root, docs=FIGURE_TABLES):
    """'doc:line: ...' for every figure of docs' figures tables that is not
    the value of the results JSON the doc names, rounded as the doc shows it."""
    found = []
    for doc, header in docs.items():
        text = _read(os.path.join(root, doc))
        refs = sorted(set(RESULTS_REF.findall(text)))
        if len(refs) != 1:
            found.append(f"{doc}: names {len(refs)} results JSON files in docs/bench-archive/ "
                         f"({', '.join(refs) or 'none'}): name the one its figures are from")
            continue
        with open(os.path.join(root, refs[0])) as f:
            data = json.load(f)
        rows = FIGURES.get(doc, {})
        for n, cells, cols in _figure_tables(text, header):
            key = re.sub(r"\*\*", "", cells[0])
            if (doc, key) in UNCHECKED_FIGURE_ROWS:
                continue
            if key not in rows:
                found.append(f"{doc}:{n}: the row '{key}' has no JSON path in FIGURES "
                             f"(integration-tests/test_docs.py)")
                continue
            for col, specs in zip(cols, rows[key]):
                shown = FIGURE.findall(cells[col]) if col < len(cells) else []
                if len(shown) != len(specs):
                    found.append(f"{doc}:{n}: '{key}', column {col + 1}: {len(shown)} figures, "
                                 f"FIGURES maps {len(specs)}")
                    continue
                for (whole, frac), spec in zip(shown, specs):
                    figure = whole.replace(",", "") + frac
                    vals = _spec_values(data, spec)
                    want = [f"{v:.{max(len(frac) - 1, 0)}f}" for v in vals]
                    if not vals or any(w != figure for w in want):
                        found.append(f"{doc}:{n}: '{key}': {whole + frac} where {refs[0]} has "
                                     f"{', '.join(want) or 'nothing'} ({spec})")
    return found


# ---- issue numbers, indexes, length -----------------------------------------

ISSUE_REF = re.compile(r"\b[Ii]ssues?\s+#?\d+|(?<![\w&/.#])#\d+\b")


def issue_numbers(root, docs):
    return [f"{doc}:{n}: names an issue ({m.group(0)}): say what is, not which "
            "issue asked for it"
            for doc, n, line in doc_lines(root, docs) for m in ISSUE_REF.finditer(line)]


SERIES_BASE = re.compile(r"series (?:against|on) (?:Debian(?: \d+)?'s )?(?:MIT )?krb5 "
                         r"(\d+\.\d+(?:\.\d+)?)")


def series_base_drift(root, docs):
    """Docs naming the krb5 release the series applies to: it must be the one
    krb5-patches/build-krb5.sh fetches (its upstream_version)."""
    m = re.search(r"^upstream_version=(\S+)$",
                  _read(os.path.join(root, "krb5-patches/build-krb5.sh")), re.M)
    base = m.group(1) if m else "(no upstream_version in build-krb5.sh)"
    return [f"{doc}:{n}: says the series is on krb5 {v.group(1)}; build-krb5.sh "
            f"fetches {base}"
            for doc, n, line in doc_lines(root, docs)
            for v in SERIES_BASE.finditer(line) if v.group(1) != base]


def design_index_gaps(root, index="docs/design/README.md"):
    path = os.path.join(root, index)
    if not os.path.exists(path):
        return [f"{index}: missing (an index of the design docs)"]
    linked = set(re.findall(r"\]\(([^)#\s]+)", _read(path)))
    return [f"{index}: does not list {os.path.basename(d)}"
            for d in sorted(glob.glob(os.path.join(root, "docs/design/*.md")))
            if os.path.basename(d) not in linked | {"README.md"}]


def folder_table_gaps(root, doc="docs/design/architecture.md"):
    """Folders of kdc-plugin/src and mpc-server/src that the folder table's
    row of their component does not name."""
    rows = {m.group(1): (n, line)
            for n, line in enumerate(_read(os.path.join(root, doc)).splitlines(), 1)
            for m in [re.match(r"\|\s*`([\w-]+)/`\s*\|", line)] if m}
    found = []
    for comp in ("kdc-plugin", "mpc-server"):
        src = os.path.join(root, comp, "src")
        n, row = rows.get(comp, (0, ""))
        for d in sorted(os.listdir(src)):
            if os.path.isdir(os.path.join(src, d)) and not re.search(
                    r"(?<![\w-])" + re.escape(d) + r"(?![\w-])", row):
                found.append(f"{doc}:{n}: the folder table's `{comp}/` row does not "
                             f"name src/{d}/")
    return found


def readme_too_long(root):
    found = []
    for doc, most in (("README.md", README_MAX_LINES),
                      ("docs/security-model.md", SECURITY_MODEL_MAX_LINES)):
        path = os.path.join(root, doc)
        n = len(_read(path).splitlines()) if os.path.exists(path) else 0
        if n > most:
            found.append(f"{doc}: {n} lines, more than {most}")
    return found


# ---- the checks on this tree ------------------------------------------------

def _report(found):
    assert not found, f"{len(found)} stale references in the docs:\n" + "\n".join(found)


DOCS = product_docs(ROOT)


def test_patch_numbers_and_names():
    _report(stale_patch_refs(ROOT, DOCS) + patch_table_drift(ROOT))


def test_paths_exist():
    _report(missing_paths(ROOT, DOCS))


def test_path_fragments_exist():
    krb5 = krb5_tree()
    if krb5 is None:
        pytest.skip(f"no patched krb5 tree at {KRB5_SRC} (make krb5)")
    _report(missing_paths(ROOT, DOCS, krb5))


def test_options_defined():
    _report(unknown_options(ROOT, DOCS, defined_options(ROOT)))


def test_make_targets():
    _report(unknown_make_targets(ROOT, DOCS))


def test_metrics_defined():
    _report(unknown_metrics(ROOT, DOCS, defined_metrics(ROOT)))


def test_no_issue_numbers():
    _report(issue_numbers(ROOT, DOCS))


def test_series_base_named_right():
    _report(series_base_drift(ROOT, DOCS))


def test_design_index_and_folder_table():
    _report(design_index_gaps(ROOT) + folder_table_gaps(ROOT) + readme_too_long(ROOT))


def test_cited_sections_exist():
    _report(stale_section_refs(ROOT, DOCS))


def test_figures_are_the_bench_results():
    _report(wrong_figures(ROOT))


# ---- each check on a small tree, clean and with a planted stale reference --

def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


@pytest.fixture
def tree(tmp_path):
    """A tree every check passes: two patches, a flag, a metric, a target,
    the design index and the folder table."""
    root = str(tmp_path)
    files = {
        "krb5-patches/series": "# header\n0001-Stop-contacting-a-KDC.patch\n"
                               "0002-KDC-make-the-UDP-receive-buffer-size-configurab.patch\n",
        "krb5-patches/build-krb5.sh": "#!/bin/bash\nupstream_version=1.21.3\n",
        "Makefile": ".PHONY: demo\ndemo: build\n\t@true\nJOBS ?= 2\n",
        "mpc-server/src/main.cc": 'ABSL_FLAG(bool, early_flush, false, "x");\n'
                                  'ABSL_FLAG(std::string, listen, "", "x");\n',
        "mpc-server/src/aes/aes.cc": 'auto& c = counter("kmpc_aes_blocks_total", "x");\n',
        "kdc-plugin/src/router.cc": "int x;\n",
        "README.md": "# kmpc\n\n`make demo` runs `mpc-server/src/main.cc` with `--listen`.\n",
        "docs/krb5-patches.md": "# Patches\n\nTwo patches:\n\n| # | Patch |\n|---|---|\n"
                                "| 0001 | Stop contacting a KDC |\n"
                                "| 0002 | KDC: make the UDP receive buffer size configurable |\n",
        "docs/guide.md": "Patch `0002-KDC-make-the-UDP` (`router.cc`, `do_as_req.c`), metric "
                         "`kmpc_aes_blocks_total`, `--noearly_flush`, [design](design/README.md).\n",
        "docs/design/README.md": "[architecture](architecture.md)\n",
        "docs/design/architecture.md": "| folder | what |\n|---|---|\n"
                                       "| `kdc-plugin/` | the module |\n"
                                       "| `mpc-server/` | the server (`src/`: `aes/`) |\n",
    }
    for path, text in files.items():
        _write(root, path, text)
    subprocess.run(["git", "init", "-q", root], check=True)
    return root


KRB5_FAKE = {"src/", "src/kdc/", "src/kdc/do_as_req.c"}


def _all_checks(root):
    docs = product_docs(root)
    return (stale_patch_refs(root, docs) + patch_table_drift(root) +
            missing_paths(root, docs) + missing_paths(root, docs, KRB5_FAKE) +
            unknown_options(root, docs, defined_options(root)) +
            unknown_make_targets(root, docs) +
            unknown_metrics(root, docs, defined_metrics(root)) + issue_numbers(root, docs) +
            series_base_drift(root, docs) + stale_section_refs(root, docs) +
            design_index_gaps(root) + folder_table_gaps(root) + readme_too_long(root))


def test_checks_pass_a_clean_tree(tree):
    assert _all_checks(tree) == []


@pytest.mark.parametrize("planted, expected", [
    ("patch 0002 alone", "docs/planted.md:2: patch number 0002 without its name"),
    ("`0001-KDC-make-the-UDP`", "docs/planted.md:2: KDC-make-the-UDP is 0002-"),
    ("`0003-KDC-drop-stale`", "docs/planted.md:2: no patch in krb5-patches/series is "
                              "named KDC-drop-stale"),
    ("`kdc-plugin/src/speculator.cc`", "docs/planted.md:2: kdc-plugin/src/speculator.cc: "
                                       "no such file or folder in the repository"),
    ("`planner.{h,cc}`", "docs/planted.md:2: planner.h: no such file"),
    ("`src/kdc/do_tgs_req.c`", "docs/planted.md:2: src/kdc/do_tgs_req.c: no such file or "
                               "folder in the patched krb5 tree"),
    ("[log](bench-log.md)", "docs/planted.md:2: the link bench-log.md leads nowhere"),
    ("`--speculate_max`", "docs/planted.md:2: --speculate_max: no kmpc program"),
    ("`make bench-all`", "docs/planted.md:2: make bench-all: no such target"),
    ("`kmpc_kdc_speculative_used_total`",
     "docs/planted.md:2: kmpc_kdc_speculative_used_total: no metric"),
    ("(issue 48)", "docs/planted.md:2: names an issue (issue 48)"),
    ("the patch series against Debian's krb5 1.20.1",
     "docs/planted.md:2: says the series is on krb5 1.20.1; build-krb5.sh fetches 1.21.3"),
    ('see guide.md, "Freshness of the\ngate"',
     'docs/planted.md:2: guide.md, "Freshness of the gate": no such section in docs/guide.md'),
])
def test_checks_catch_a_planted_stale_reference(tree, planted, expected):
    _write(tree, "docs/planted.md", f"# Planted\n{planted}\n")
    found = _all_checks(tree)
    assert any(f.startswith(expected) for f in found), found
    assert all(f.startswith("docs/planted.md:2: ") for f in found), found


def test_patch_renumbering_fails_the_old_numbers(tree):
    """A patch inserted in the series: the docs' citations of the patches
    after it fail, naming the new number."""
    _write(tree, "krb5-patches/series", "0001-Add-a-fix.patch\n0002-Stop-contacting-a-KDC.patch\n"
           "0003-KDC-make-the-UDP-receive-buffer-size-configurab.patch\n")
    found = stale_patch_refs(tree, product_docs(tree))
    assert "docs/guide.md:1: KDC-make-the-UDP is 0003-KDC-make-the-UDP-receive-buffer-size-" \
        "configurab.patch in krb5-patches/series, not 0002" in found, found
    assert any(f.startswith("docs/krb5-patches.md:7: Stop-contacting-a-KDC is 0002-") for f in found)
    assert patch_table_drift(tree) == [
        "docs/krb5-patches.md: the table lists 2 patches, the series 3; missing ['0003'], "
        "not in the series none",
        "docs/krb5-patches.md:3: says Two patches, the series has 3"]


def test_index_folder_table_and_length_gaps(tree):
    _write(tree, "docs/design/new.md", "# New\n")
    os.makedirs(os.path.join(tree, "mpc-server/src/cts"))
    _write(tree, "README.md", "x\n" * (README_MAX_LINES + 1))
    assert design_index_gaps(tree) == ["docs/design/README.md: does not list new.md"]
    assert folder_table_gaps(tree) == [
        "docs/design/architecture.md:4: the folder table's `mpc-server/` row does not name src/cts/"]
    assert readme_too_long(tree) == [f"README.md: {README_MAX_LINES + 1} lines, more than "
                                     f"{README_MAX_LINES}"]


def _figures_tree(tmp_path):
    """README.md, docs/benchmarks.md and the results they name, copied."""
    root = str(tmp_path)
    paths = ["README.md", "docs/benchmarks.md"]
    for doc in list(paths):
        paths += RESULTS_REF.findall(_read(os.path.join(ROOT, doc)))
    for path in set(paths):
        _write(root, path, _read(os.path.join(ROOT, path)))
    return root


def _plant(root, doc, old, new):
    text = _read(os.path.join(root, doc))
    assert text.count(old) == 1, (doc, old)
    _write(root, doc, text.replace(old, new))


@pytest.mark.parametrize("doc, old, new, expected", [
    ("README.md", "| 1,547 logins/s | 6,820 |", "| 1,574 logins/s | 6,820 |",
     "'login-storm peak, krbtgt in the cluster': 1,574 where docs/bench-archive/"),
    ("README.md", "98 ms (FAST 98 ms) | 14 ms", "98 ms (FAST 98 ms) | 41 ms",
     "'users' aes256-cts keys in the cluster: Debian's kinit p50, one client': 41 where"),
    ("README.md", "840 logins/s; 1.2 ms", "840 logins/s; 1.3 ms",
     "'the same users: storm peak over TCP; each server's CPU per login, closed loop "
     "of 256': 1.3 where"),
    ("docs/benchmarks.md", "**97.8** / 125.4 ms", "**97.8** / 152.4 ms",
     "'kinit p50 / p99, one client': 152.4 where"),
    ("docs/benchmarks.md", "| 75.8 ms |", "| 57.8 ms |", "'p99 at 90% of the peak': 57.8 where"),
    ("docs/benchmarks.md", "| p99 at 90% of the peak |", "| p99 at 95% of the peak |",
     "the row 'p99 at 95% of the peak' has no JSON path in FIGURES"),
    ("docs/benchmarks.md", "| 75.8 ms |", "| 75.8 ms, 2 runs |",
     "'p99 at 90% of the peak', column 2: 2 figures, FIGURES maps 1"),
])
def test_a_planted_wrong_figure_fails(tmp_path, doc, old, new, expected):
    """A figure of README's figures table or of benchmarks.md's tables that
    is not the results JSON's value, a row without a JSON path and a figure
    too many each fail the check, naming the doc's line."""
    root = _figures_tree(tmp_path)
    assert wrong_figures(root) == []
    _plant(root, doc, old, new)
    found = wrong_figures(root)
    assert len(found) == 1 and found[0].startswith(doc + ":") and expected in found[0], found


def test_figures_need_the_results_they_come_from(tmp_path):
    """A doc that names no results JSON (or two) fails: its figures cannot be
    checked."""
    root = _figures_tree(tmp_path)
    ref = RESULTS_REF.findall(_read(os.path.join(root, "README.md")))[0]
    _plant(root, "README.md", "[" + ref + "](" + ref + ")", "the bench's results")
    assert wrong_figures(root) == [
        "README.md: names 0 results JSON files in docs/bench-archive/ (none): name the one "
        "its figures are from"]


def test_logs_are_not_checked(tree):
    _write(tree, "docs/bench-log.md", "patch 0009 (issue 7), `--gone`\n")
    assert "docs/bench-log.md" not in product_docs(tree)
    assert _all_checks(tree) == []
