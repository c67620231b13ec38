#!/usr/bin/env python3
"""The installed documentation stands on its own (issue 17): installs a build into a temporary prefix, then
checks that every relative Markdown link in the installed .md files names an installed file (and, with a
#fragment, one of its headings), and that every `docs/NAME.md` the text names is installed. Also checks that
docs/api.md names every public header under include/bptrain/.

Usage: check_installed_docs.py SOURCE_DIR BUILD_DIR WORK_DIR"""
import pathlib
import re
import shutil
import subprocess
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")
MENTION = re.compile(r"`(docs/[A-Za-z0-9_.-]+\.md)`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
CODE_FENCE = re.compile(r"^(```|~~~)")


def slug(heading):
    """GitHub's anchor for a heading (Doxygen's explicit {#id} wins when present)."""
    explicit = re.search(r"\{#([A-Za-z0-9_-]+)\}\s*$", heading)
    if explicit:
        return explicit.group(1)
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, inside_code = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if CODE_FENCE.match(line):
            inside_code = not inside_code
        elif not inside_code and HEADING.match(line):
            found.add(slug(HEADING.match(line).group(1)))
    return found


def prose_lines(path):
    inside_code = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if CODE_FENCE.match(line):
            inside_code = not inside_code
        elif not inside_code:
            yield number, line


def check_links(root):
    problems, checked = [], 0
    pages = sorted(root.rglob("*.md"))
    if not any(page.name == "README.md" for page in pages):
        return [f"no README.md installed under {root}"], 0
    for page in pages:
        for number, line in prose_lines(page):
            where = f"{page.relative_to(root)}:{number}"
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                checked += 1
                file_part, _, fragment = target.partition("#")
                destination = (page.parent / file_part).resolve() if file_part else page
                if not destination.is_file():
                    problems.append(f"{where}: link '{target}': {file_part} is not installed")
                elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
                    problems.append(f"{where}: link '{target}': no heading '#{fragment}' in {file_part or page.name}")
            for mention in MENTION.findall(line):
                checked += 1
                if not (root / mention).is_file():
                    problems.append(f"{where}: names `{mention}`, which is not installed")
    return problems, checked


def check_api_reference(source):
    listed = (source / "docs" / "api.md").read_text(encoding="utf-8")
    headers = sorted((source / "include" / "bptrain").glob("*.h"))
    return [f"docs/api.md does not list `bptrain/{h.name}`" for h in headers if f"`bptrain/{h.name}`" not in listed], len(headers)


def main():
    source, build, work = (pathlib.Path(argument).resolve() for argument in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    prefix = work / "prefix"
    log = work / "install.log"
    work.mkdir(parents=True)
    with open(log, "w") as output:
        subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, stdout=output)
    roots = [path for path in prefix.glob("share/doc/*") if path.is_dir()]
    if len(roots) != 1:
        sys.exit(f"FAIL: expected one documentation folder under {prefix}/share/doc, found {roots}")
    problems, checked = check_links(roots[0])
    api_problems, headers = check_api_reference(source)
    problems += api_problems
    for problem in problems:
        print("FAIL:", problem)
    if problems:
        sys.exit(1)
    pages = len(list(roots[0].rglob("*.md")))
    print(f"{pages} installed pages in {roots[0]}: {checked} links and docs/ paths resolve; "
          f"docs/api.md lists all {headers} public headers")


if __name__ == "__main__":
    main()
