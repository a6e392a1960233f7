# Shell functions shared by build_caffe.sh and gather_offline.sh (sourced, not run).

# The Debian mirror the machine already uses (deb822 .sources or one-line .list);
# falls back to deb.debian.org.
debian_mirror() {
  local m=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    m="$(awk '
      /^[[:space:]]*$/ { uris=""; deb=0; next }
      /^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) uris=$i }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i ~ /^(bullseye|bookworm|trixie|forky|sid|testing|stable|oldstable)$/) deb=1 }
      { if (uris != "" && deb) { print uris; exit } }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
  fi
  if [[ -z "$m" ]]; then
    m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
         awk '$1 == "deb" || $1 == "deb-src" {
                for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp):\/\/.*\/debian\/?$/) { print $i; exit }
              }' || true)"
  fi
  m="${m:-http://deb.debian.org/debian}"
  echo "${m%/}"
}
