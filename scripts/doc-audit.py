#!/usr/bin/env python3
"""List public items of a crate whose docs have neither an example nor a link to one.

Reads the HTML `cargo doc` wrote (the public API exactly as a user sees it), so run first:

    RUSTDOCFLAGS="-D warnings" cargo doc -p hopbudget --all-features --no-deps
    scripts/doc-audit.py target/doc/hopbudget [CRATE]

An item counts as covered when its doc block holds a rendered Rust example, or a link whose
doc block mentions an example ("See the [example](Self#examples)", "See the example on
[`ServerBudgetLayer`]"). Items are: every page (module, struct, enum, trait, function,
constant, type alias, macro, static), every inherent method and associated constant, and every
method a trait declares. Trait implementations are documented by their trait, fields and
variants by their type, so neither is counted.

It also lists the module pages' "Re-exports" of this crate's own items: each is a second
public path to an item documented elsewhere.

Exit status 1 when anything is listed, so CI can hold the line.
"""

import html
import os
import re
import sys

PAGE_KINDS = ("struct", "enum", "trait", "fn", "constant", "type", "macro", "static", "union")
EXAMPLE = 'class="rust rust-example-rendered"'


def covered(docblock: str) -> bool:
    if EXAMPLE in docblock:
        return True
    text = re.sub(r"<[^>]+>", " ", docblock)
    return "<a href" in docblock and re.search(r"\bexamples?\b", text, re.I) is not None


def first_docblock(fragment: str) -> str:
    """The doc block directly attached to a member: the first `docblock` div, if any."""
    m = re.search(r'<div class="docblock">(.*?)</div>(?:</details>|\s*<(?:details|section|/div))',
                  fragment, re.S)
    return m.group(1) if m else ""


def top_doc(page: str) -> str:
    m = re.search(r'<details class="toggle top-doc"[^>]*>.*?<div class="docblock">(.*?)</div></details>',
                  page, re.S)
    return m.group(1) if m else ""


def section(page: str, list_id: str) -> str:
    """The HTML of one `<div id=list_id>` list, up to the next h2 section header."""
    start = page.find(f'id="{list_id}"')
    if start < 0:
        return ""
    end = page.find("<h2 ", start)
    return page[start:end if end > 0 else len(page)]


def members(fragment: str, kinds):
    """(id, docblock) for each member section in a list; members without docs have none."""
    ids = list(re.finditer(r'<section id="((?:%s)\.[^"]+)" class="[^"]*"' % "|".join(kinds), fragment))
    for i, m in enumerate(ids):
        end = ids[i + 1].start() if i + 1 < len(ids) else len(fragment)
        chunk = fragment[m.end():end]
        # A documented member is `<details><summary><section/></summary><div class="docblock">`;
        # an undocumented one is a bare section, followed directly by the next member.
        doc = ""
        after = chunk.split("</summary>", 1)
        if len(after) == 2 and after[0].count("<section") == 0:
            doc = first_docblock("</summary>" + after[1])
        yield m.group(1), doc


def audit(root: str, crate: str):
    missing, reexports, total = [], [], 0
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            kind = name.split(".", 1)[0]
            if name != "index.html" and kind not in PAGE_KINDS:
                continue
            path = os.path.join(dirpath, name)
            page = open(path, encoding="utf-8").read()
            if 'http-equiv="refresh"' in page:  # a redirect page, not an item
                continue
            if f"src/{crate}/" not in page:  # a foreign item re-exported inline: not ours
                continue
            rel = os.path.relpath(dirpath, root)
            modpath = crate if rel == "." else f"{crate}::" + rel.replace(os.sep, "::")
            item = modpath if name == "index.html" else f"{modpath}::{name.split('.')[1]}"
            total += 1
            if not covered(top_doc(page)):
                missing.append(f"{kind if name != 'index.html' else 'mod'} {item}")
            impls = section(page, "implementations-list")
            for member, doc in members(impls, ("method", "associatedconstant", "associatedtype")):
                total += 1
                if not covered(doc):
                    missing.append(f"{member.split('.')[0]} {item}::{member.split('.', 1)[1]}")
            if kind == "trait":
                for list_id in ("required-methods", "provided-methods", "required-associated-types",
                                "required-associated-consts"):
                    for member, doc in members(section(page, list_id), ("tymethod", "method", "associatedtype", "associatedconstant")):
                        total += 1
                        if not covered(doc):
                            missing.append(f"{member.split('.')[0]} {item}::{member.split('.', 1)[1]}")
            if name == "index.html":
                rx = section(page, "reexports")
                for m in re.finditer(r'<code>pub use (.*?);</code>', rx, re.S):
                    use = html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))
                    # Links into this crate's own docs carry its path in their title.
                    if f" {crate}::" in m.group(1) or use.startswith(("crate::", "self::", "super::")):
                        reexports.append(f"{modpath}: pub use {use}")
    return total, missing, reexports


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "target/doc/hopbudget"
    crate = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(root.rstrip("/"))
    total, missing, reexports = audit(root, crate)
    for line in missing:
        print("no example:", line)
    for line in reexports:
        print("second path:", line)
    print(f"{total} public items, {len(missing)} without an example or a link to one, "
          f"{len(reexports)} re-exports of the crate's own items")
    sys.exit(1 if missing or reexports else 0)


if __name__ == "__main__":
    main()
