#!/usr/bin/env bash
# The npm trees of the offline checks (the Grafana dashboard's, the Kubernetes manifests'),
# installed once per user and machine, not once per build directory: a fresh clone's
# `make test` spent 12-19 s on them (docs/benchmarks.md, "Sixth pass").
#
#   npm-tree.sh SRC_DIR WORK_DIR [SETUP]   install (when needed) and link
#   npm-tree.sh --installed SRC_DIR WORK_DIR [SETUP]   exit 0 when WORK_DIR links that tree
#
# SRC_DIR holds package.json, package-lock.json and the scripts that run beside them.
# The tree is `npm ci` of that lock file, plus what SETUP (a script of SRC_DIR, run once
# with `node SETUP TREE` after npm ci) makes in it, in
#   ${XDG_CACHE_HOME:-~/.cache}/gpureap/npm/NAME-HASH
# NAME being SRC_DIR's name and HASH covering package.json, package-lock.json and SETUP,
# so a change to any of them makes a new tree. It is installed in a temporary directory beside that and renamed
# into place, so two builds at once never use half a tree; the 3 newest trees of a NAME are
# kept. Where that directory cannot be made, the tree is made in WORK_DIR/tree instead.
# WORK_DIR gets a copy of SRC_DIR's files and a link to each directory of the tree
# (node_modules, and what SETUP made), so the scripts run there as they would in the tree.
# Nothing is written to the source tree.
set -euo pipefail
check_only=false
if [ "${1:-}" = --installed ]; then check_only=true; shift; fi
src=$(cd "${1:?usage: npm-tree.sh [--installed] SRC_DIR WORK_DIR [SETUP]}" && pwd)
work=${2:?usage: npm-tree.sh [--installed] SRC_DIR WORK_DIR [SETUP]}
setup=${3:-}
name=$(basename "$src")
hash=$(cd "$src" && cat package.json package-lock.json ${setup:+"$setup"} | sha256sum | cut -c1-16)
stamp=.gpureap-tree-$hash

if $check_only; then
  [ -e "$work/node_modules/$stamp" ]
  exit
fi
if [ -e "$work/node_modules/$stamp" ]; then cp "$src"/* "$work/"; exit 0; fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "npm-tree: node and npm are not installed" >&2
  exit 1
fi

cache=${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/gpureap/npm
if (umask 077 && mkdir -p "$cache") 2>/dev/null && [ -w "$cache" ]; then
  tree=$cache/$name-$hash
else
  tree=$(realpath -m "$work")-tree
fi
if [ ! -e "$tree/node_modules/$stamp" ]; then
  echo "npm-tree: npm ci for $name in $tree"
  mkdir -p "$(dirname "$tree")"
  tmp=$(mktemp -d "$tree.new-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp "$src"/* "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  if [ -n "$setup" ]; then node "$tmp/$setup" "$tmp"; fi
  touch "$tmp/node_modules/$stamp"
  # Another build may have put the same tree in place first: then this copy goes.
  mv -T "$tmp" "$tree" 2>/dev/null || true
  # The 3 newest trees of this name in the cache are kept (each is 100-250 MB).
  if [ "$tree" = "$cache/$name-$hash" ]; then
    ls -1dt "$cache/$name"-???????????????? | tail -n +4 | xargs -r rm -rf
  fi
fi
touch "$tree"

mkdir -p "$work"
cp "$src"/* "$work/"
for dir in "$tree"/*/; do
  link=$work/$(basename "$dir")
  rm -rf "$link"  # a link to an older tree, or a tree an earlier version installed here
  ln -s "${dir%/}" "$link"
done
