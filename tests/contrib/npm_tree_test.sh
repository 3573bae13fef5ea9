#!/usr/bin/env bash
# scripts/npm-tree.sh, with stand-ins for npm and node on PATH (they record each call and
# make a node_modules), so it runs in a second and offline: the tree is installed once per
# cache and shared by build directories, a changed lock file is a new tree, the 3 newest
# are kept, --installed says whether a directory links the current tree, and where the
# cache cannot be made the tree goes beside the work directory (before, that case failed
# `make deps` after installing). Usage: npm_tree_test.sh SOURCE_DIR
set -u
src=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
mkdir -p "$t/bin" "$t/src"
cat >"$t/bin/npm" <<'STUB'
#!/bin/sh
echo "npm $*" >>"$NPM_TREE_TEST_CALLS"
mkdir -p node_modules/pkg && echo x >node_modules/pkg/index.js
STUB
cat >"$t/bin/node" <<'STUB'
#!/bin/sh
echo "node $*" >>"$NPM_TREE_TEST_CALLS"
mkdir -p "$2/schemas" && echo '{}' >"$2/schemas/made.json"
STUB
chmod +x "$t/bin/npm" "$t/bin/node"
echo '{"name": "x"}' >"$t/src/package.json"
echo '{"lockfileVersion": 3}' >"$t/src/package-lock.json"
echo '// setup' >"$t/src/setup.cjs"
echo '// check' >"$t/src/check.cjs"
export PATH="$t/bin:$PATH" NPM_TREE_TEST_CALLS="$t/calls" XDG_CACHE_HOME="$t/cache"
tree() { "$src/scripts/npm-tree.sh" "$@" >/dev/null; }
calls() { grep -c "^npm ci" "$t/calls" 2>/dev/null || echo 0; }

tree "$t/src" "$t/b1/w" setup.cjs
check "installs into the cache" '[ "$(calls)" = 1 ] && ls -d "$t"/cache/gpureap/npm/src-* >/dev/null'
check "links node_modules and what the setup made" \
      '[ -L "$t/b1/w/node_modules" ] && [ -e "$t/b1/w/schemas/made.json" ] && [ -e "$t/b1/w/check.cjs" ]'
check "--installed after it" '"$src/scripts/npm-tree.sh" --installed "$t/src" "$t/b1/w" setup.cjs'
check "--installed wants the same setup" '! "$src/scripts/npm-tree.sh" --installed "$t/src" "$t/b1/w"'
tree "$t/src" "$t/b2/w" setup.cjs
check "a second build directory reuses the tree" '[ "$(calls)" = 1 ] && [ -L "$t/b2/w/node_modules" ]'
for i in 1 2 3 4; do
  echo "{\"lockfileVersion\": 3, \"v\": $i}" >"$t/src/package-lock.json"
  check "a changed lock file is not installed yet ($i)" \
        '! "$src/scripts/npm-tree.sh" --installed "$t/src" "$t/b1/w" setup.cjs'
  tree "$t/src" "$t/b1/w" setup.cjs
  sleep 0.01
done
check "each lock file its tree" '[ "$(calls)" = 5 ]'
check "the 3 newest trees kept" '[ "$(ls -d "$t"/cache/gpureap/npm/src-* | wc -l)" = 3 ]'
check "the build directory links the newest" '"$src/scripts/npm-tree.sh" --installed "$t/src" "$t/b1/w" setup.cjs'
check "no temporary tree left" '[ -z "$(ls -d "$t"/cache/gpureap/npm/*.new-* 2>/dev/null)" ]'

# No cache directory can be made: the tree goes beside the work directory.
XDG_CACHE_HOME=/proc/npm-tree-test "$src/scripts/npm-tree.sh" "$t/src" "$t/b3/w" setup.cjs >/dev/null
rc=$?
check "without a cache: exit 0" '[ $rc = 0 ]'
check "without a cache: the tree beside the work directory" \
      '[ -e "$t/b3/w-tree/node_modules" ] && [ -L "$t/b3/w/node_modules" ]'
check "without a cache: --installed" '"$src/scripts/npm-tree.sh" --installed "$t/src" "$t/b3/w" setup.cjs'

# A build directory an older version filled with a real node_modules gets the link.
mkdir -p "$t/b4/w/node_modules/old"
tree "$t/src" "$t/b4/w" setup.cjs
check "a real node_modules is replaced by the link" '[ -L "$t/b4/w/node_modules" ]'
[ $fail = 0 ] && echo "npm-tree: every check passed"
exit $fail
