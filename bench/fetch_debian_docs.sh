#!/usr/bin/env bash
# Fetch the real documentation HTML used by bench/bench_canonicalize.py (issue 2).
#
# Downloads Debian's python3.11-doc and debian-handbook packages with `apt-get download`
# (Debian's package registry only; nothing else is fetched), unpacks them with `dpkg-deb -x`
# into bench/data/root/ and prints how many .html files it holds. Idempotent: a package that
# is already unpacked is skipped. Needs apt-get/dpkg-deb (Debian or a derivative).
#
#   bash bench/fetch_debian_docs.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="$here/data"
debs="$data/debs"
root="$data/root"
packages=(python3.11-doc debian-handbook apache2-doc postgresql-doc-15)
mkdir -p "$debs" "$root"

for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "fetch_debian_docs: $tool not found (needs a Debian-based machine)" >&2; exit 2; }
done

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

need_update=0
for pkg in "${packages[@]}"; do
  if [[ -f "$root/.done-$pkg" ]]; then continue; fi
  c="$(candidate "$pkg")"
  if [[ -z "$c" || "$c" == "(none)" ]]; then need_update=1; fi
done
if [[ "$need_update" == 1 ]]; then
  echo "fetch_debian_docs: package lists lack a candidate; running apt-get update" >&2
  if [[ "$(id -u)" == 0 ]]; then apt-get update -q >&2; else sudo apt-get update -q >&2; fi
fi

for pkg in "${packages[@]}"; do
  if [[ -f "$root/.done-$pkg" ]]; then
    echo "fetch_debian_docs: $pkg $(cat "$root/.done-$pkg") already unpacked, skipping" >&2
    continue
  fi
  version="$(candidate "$pkg")"
  if [[ -z "$version" || "$version" == "(none)" ]]; then
    echo "fetch_debian_docs: no candidate version of $pkg in the package lists (apt-cache policy $pkg)" >&2
    exit 1
  fi
  echo "fetch_debian_docs: $pkg candidate $version" >&2
  deb="$(ls "$debs"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)"
  if [[ -z "$deb" ]]; then
    # apt-get download writes into the current directory; as root it may warn about the _apt sandbox user
    (cd "$debs" && apt-get download -q "$pkg=$version" >&2)
    deb="$(ls "$debs"/"${pkg}"_*.deb | head -n1)"
  fi
  dpkg-deb -x "$deb" "$root"
  echo "$version" > "$root/.done-$pkg"
done

# regular files only: the packages also ship symlinked directories (e.g. python3.11-doc/html ->
# ../python3.11/html) that would count the same pages twice; the benchmark reads the same set.
html_count="$(find "$root" -type f \( -name '*.html' -o -name '*.htm' \) | wc -l)"
html_bytes="$(find "$root" -type f \( -name '*.html' -o -name '*.htm' \) -printf '%s\n' | awk '{s+=$1} END {print s+0}')"
for pkg in "${packages[@]}"; do
  echo "$pkg $(cat "$root/.done-$pkg")"
done
echo "html files: $html_count ($html_bytes bytes) under $root"
