#!/bin/sh
# Regenerates the build system: ./autogen.sh && ./configure && make && make check
set -e
cd "$(dirname "$0")"
autoreconf --install --force --warnings=all
