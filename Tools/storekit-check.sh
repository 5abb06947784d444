#!/usr/bin/env bash
# Type-checks the whole PurchaseLedgerStoreKit target, its Apple-only layer (Apple/) included,
# against stand-in StoreKit, Background Assets and UIKit modules written from Apple's declarations
# (Tools/storekit-check/), in Swift 6 mode with the package's strictness settings, once per
# platform branch of the target's `#if os(...)` conditions: iOS, macOS, tvOS, watchOS and visionOS
# forced in turn. Warnings are errors. Then the StoreKit snippets of README.md and the DocC guide,
# as an app would hold them, against the iOS branch (Tools/storekit-check/snippets.py). Run by
# Tools/test.sh after the build (it needs the PurchaseLedger module of `swift build`); no Apple SDK
# is needed.
#
# Deprecation is modelled: the stand-ins mark what Apple deprecated at the package's floors (or
# later) `@available(*, deprecated)`, and `#available` conditions become run-time ones so their
# `else` branches are checked too; a use the layer does not confine on purpose is an error.
# What it cannot see: availability (`@available`, `#available`, API_UNAVAILABLE), which stand-ins
# cannot model per platform. docs/platforms.md lists each Apple API used, its
# availability per platform and the guard that covers it, and StoreKitPlatformTests checks that
# table against the sources.
set -euo pipefail
cd "$(dirname "$0")/.."
modules="$(swift build --show-bin-path)/Modules"
[ -f "$modules/PurchaseLedger.swiftmodule" ] || [ -d "$modules/PurchaseLedger.swiftmodule" ] || {
  echo "storekit-check: build the package first (swift build): no PurchaseLedger module in $modules" >&2
  exit 1
}
# The StoreKit target uses `package` declarations of PurchaseLedger: type-check it as a member of
# the same package, under the name SwiftPM gave it (the package's identity, from its folder's name).
package_name="$( (grep '"-module-name","PurchaseLedger"' .build/debug.yaml || true) | grep -o 'package-name","[^"]*"' | head -1 | cut -d'"' -f3)"
[ -n "$package_name" ] || { echo "storekit-check: cannot find the package name SwiftPM used" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
flags=(-swift-version 6 -enable-upcoming-feature ExistentialAny -enable-upcoming-feature MemberImportVisibility
  -enable-upcoming-feature InternalImportsByDefault)
# The C modules PurchaseLedger's module was built with (as SwiftPM passes them): its own CLZ4,
# GRDB's SQLite shim, and the C targets of its dependencies.
cmodules=()
while IFS= read -r map; do cmodules+=(-Xcc "-fmodule-map-file=$map"); done < <(
  { echo Sources/CLZ4/module.modulemap; find .build/checkouts/GRDB.swift/Sources/GRDBSQLite -name module.modulemap
    find "$(dirname "$modules")" -maxdepth 2 -name module.modulemap; } | sort -u)
mkdir -p "$work/standins"
printf '%s\n' '/// Stands for an `#available` check: unknown until run time, so both branches are checked.' \
  'func standInSystemIsNewer() -> Bool { Int.random(in: 0...1) == 1 }' > "$work/StandInChecks.swift"
# With library evolution, as Apple's frameworks are: their enums are not frozen, so a switch over
# one needs `@unknown default` here as on a device. (Foundation on Linux is built without it, which
# swiftc notes once per module.)
for module in UIKit SwiftUI BackgroundAssets StoreKit; do
  swiftc -emit-module -parse-as-library -enable-library-evolution -module-name "$module" "${flags[@]}" \
    -I "$work/standins" "Tools/storekit-check/$module.swift" -emit-module-path "$work/standins/$module.swiftmodule" 2> "$work/$module.log" || {
    cat "$work/$module.log" >&2
    exit 1
  }
done
failed=()
for platform in iOS macOS tvOS watchOS visionOS; do
  # os(...) is the target's platform; here a flag of our own stands for it, one branch at a time.
  files=()
  while IFS= read -r source; do
    copy="$work/$platform/$source"
    mkdir -p "$(dirname "$copy")"
    # `#available(...)` is always true on Linux, so Swift would not look at its `else` branch: a
    # condition it cannot evaluate (StandInChecks.swift) makes it check both, as on an older device.
    sed -E -e 's/os\((iOS|macOS|tvOS|watchOS|visionOS)\)/STANDIN_OS_\1/g' -e 's/#available\([^)]*\)/standInSystemIsNewer()/g' "$source" > "$copy"
    files+=("$copy")
  done < <(find Sources/PurchaseLedgerStoreKit -name '*.swift' | sort)
  files+=("$work/StandInChecks.swift")
  if swiftc -typecheck -module-name PurchaseLedgerStoreKit -package-name "$package_name" "${flags[@]}" -warnings-as-errors "${cmodules[@]}" -D "STANDIN_OS_$platform" \
    -I "$work/standins" -I "$modules" "${files[@]}" 2> "$work/$platform.log"; then
    echo "storekit-check: $platform branch type-checks"
  else
    sed "s#$work/$platform/##g" "$work/$platform.log" >&2
    failed+=("$platform")
  fi
done
# The StoreKit snippets of README.md and the DocC guide, as a user pastes them into an iOS app:
# compiled against the layer (its iOS branch, built from the stand-ins) and the stand-ins. Names a
# snippet takes from its surroundings (`product`, `transaction`...) are declared in a prelude.
mkdir -p "$work/mods" "$work/snippets"
ios_files=()
while IFS= read -r source; do ios_files+=("$work/iOS/$source"); done < <(find Sources/PurchaseLedgerStoreKit -name '*.swift' | sort)
ios_files+=("$work/StandInChecks.swift")
if swiftc -emit-module -module-name PurchaseLedgerStoreKit -package-name "$package_name" "${flags[@]}" "${cmodules[@]}" -D STANDIN_OS_iOS \
  -I "$work/standins" -I "$modules" "${ios_files[@]}" -emit-module-path "$work/mods/PurchaseLedgerStoreKit.swiftmodule" 2> "$work/module.log"; then
  python3 Tools/storekit-check/snippets.py "$work/snippets" README.md docs/storekit.md Sources/PurchaseLedgerStoreKit/PurchaseLedgerStoreKit.docc/*.md
  if swiftc -typecheck -parse-as-library -swift-version 6 -module-name Snippets "${cmodules[@]}" -I "$work/standins" -I "$work/mods" -I "$modules" \
    "$work"/snippets/*.swift 2> "$work/snippets.log"; then
    echo "storekit-check: the StoreKit snippets of README.md, docs/storekit.md and the DocC guide compile ($(ls "$work"/snippets/snippet-*.swift | wc -l) blocks)"
  else
    sed "s#$work/snippets/##g" "$work/snippets.log" >&2
    failed+=("the snippets")
  fi
else
  cat "$work/module.log" >&2
  failed+=("iOS (module)")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "storekit-check: the StoreKit layer does not compile for: ${failed[*]}" >&2
  exit 1
fi
