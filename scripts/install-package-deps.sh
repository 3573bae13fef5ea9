#!/usr/bin/env bash
# Installs what `make deb`, `make portable` and `make package-test` need beyond
# scripts/install-deps.sh, from Debian's packages: dpkg-shlibdeps and fakeroot (CPack's
# DEB generator), lintian, groff and man-db (man page checks), bash-completion and zsh
# (completion tests), binutils and file (inspecting the portable binary). Kept out of
# `make test`: lintian alone pulls ~120 packages (docs/packaging.md).
set -euo pipefail
exec "$(dirname "$0")/install-deps.sh" dpkg-dev fakeroot lintian groff-base man-db \
  bash-completion zsh binutils file "$@"
