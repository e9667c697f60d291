# Sourced by build.sh, build-jaeger.sh and build-thanos.sh: builds one Go binary into
# otel-collector/bin, cached.
#
#   build_go_binary NAME MODULE_DIR PACKAGE [TAGS]
#
# TAGS: build tags, comma-separated, as the project's own release builds set
# them (Thanos: netgo,slicelabels).
#
# Does nothing when bin/NAME is newer than every go.mod, go.sum and *.go
# file of MODULE_DIR and than the build script that calls this. Else it takes
# the binary from the cache, ~/.cache/vllm-otel-metrics/go-bin/NAME-KEY, when
# one was built from the same sources: KEY is a hash of those files, the
# calling script, TAGS and GOTOOLCHAIN (a fresh clone on a machine that
# built it before copies it instead of linking it again). Only a build needs
# Go 1.26 or newer (the collector release v0.161.0 requires it).

build_go_binary() {
    local name="$1" src="$2" package="$3" tags="${4:-}"
    local bin_dir
    bin_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bin"
    local bin="$bin_dir/$name"

    # Up to date when the binary exists and no source file is newer than it.
    if [[ -x "$bin" ]]; then
        local newer
        newer="$(find "$src" -maxdepth 1 -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -newer "$bin" -print -quit)"
        # The build script that called (its tags, its toolchain) counts too.
        if [[ -z "$newer" && ! "${BASH_SOURCE[1]}" -nt "$bin" ]]; then
            echo "$name is up to date"
            return 0
        fi
    fi

    local cache_dir="${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/go-bin" key
    key="$(
        {
            find "$src" -maxdepth 1 -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 |
                sort -z | xargs -0 cat
            cat "${BASH_SOURCE[1]}"
            echo "tags=$tags toolchain=${GOTOOLCHAIN:-}"
        } | sha256sum | cut -c1-16
    )"
    local cached="$cache_dir/$name-$key"
    mkdir -p "$bin_dir"
    if [[ -x "$cached" ]]; then
        cp -f "$cached" "$bin_dir/.$name.tmp.$$" && mv -f "$bin_dir/.$name.tmp.$$" "$bin"
        echo "$name from the cache ($cached)"
        return 0
    fi

    if ! command -v go >/dev/null 2>&1; then
        echo "building $name: 'go' not found: install Go 1.26 or newer and put it on PATH" >&2
        return 1
    fi
    local go_version
    go_version="$(go env GOVERSION)"            # e.g. go1.26.8
    if [[ "$go_version" =~ ^go1\.([0-9]+) ]] && (( BASH_REMATCH[1] < 26 )); then
        echo "building $name: $go_version is too old: install Go 1.26 or newer" >&2
        return 1
    fi

    mkdir -p "$bin_dir"
    echo "building $name with $go_version ..."
    local start=$SECONDS start_epoch
    start_epoch="$(date +%s)"
    # Build to a temporary name and move it into place, so that an
    # interrupted build never leaves a binary that looks up to date.
    local tmp="$bin_dir/.$name.tmp.$$"
    (cd "$src" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -tags="$tags" -ldflags='-s -w' -o "$tmp" "$package") || {
        rm -f "$tmp"
        return 1
    }
    # Stamp the binary with the build's start time: a source file edited
    # while the build ran stays newer than the binary, so the next run
    # rebuilds.
    touch -d "@$start_epoch" "$tmp"
    mv -f "$tmp" "$bin"
    echo "built $bin in $((SECONDS - start))s"
    # Into the cache (a copy, moved into place whole), keeping the two most
    # recent builds of NAME.
    mkdir -p "$cache_dir"
    cp -f "$bin" "$cache_dir/.$name-$key.tmp.$$" && mv -f "$cache_dir/.$name-$key.tmp.$$" "$cached"
    ls -t "$cache_dir/$name"-* 2>/dev/null | tail -n +3 | xargs -r rm -f
}
