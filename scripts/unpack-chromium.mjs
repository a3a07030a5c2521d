// node scripts/unpack-chromium.mjs <package bin dir> <out dir>
//
// The console's browser test runs Chromium's headless shell from the npm package
// @sparticuz/chromium (pinned in _tools/package-lock.json): the package carries the browser
// itself, brotli-compressed, with the few shared libraries it needs (NSS, NSPR, expat), so
// `make tools` installs a browser from the npm registry alone, with no system package and no
// download from anywhere else. This unpacks it into <out dir>: headless_shell, lib/ (those
// libraries), and `chrome`, a wrapper that runs the shell with lib/ on the library path.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { brotliDecompressSync } from "node:zlib";

const [bin, out] = process.argv.slice(2);
if (!bin || !out) {
  console.error("usage: node scripts/unpack-chromium.mjs <package bin dir> <out dir>");
  process.exit(2);
}
const tmp = `${out}.partial`;
rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp, { recursive: true });
const unbrotli = (name) => brotliDecompressSync(readFileSync(join(bin, name)));
writeFileSync(join(tmp, "headless_shell"), unbrotli("chromium.br"), { mode: 0o755 });
writeFileSync(join(tmp, "al2023.tar"), unbrotli("al2023.tar.br"));
execFileSync("tar", ["-xf", join(tmp, "al2023.tar"), "-C", tmp]);
rmSync(join(tmp, "al2023.tar"));
writeFileSync(
  join(tmp, "chrome"),
  [
    "#!/bin/sh",
    "# Chromium's headless shell from @sparticuz/chromium (see scripts/unpack-chromium.mjs).",
    'here=$(dirname "$(readlink -f "$0")")',
    'LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$here/lib" exec "$here/headless_shell" "$@"',
    "",
  ].join("\n"),
);
chmodSync(join(tmp, "chrome"), 0o755);
// Check that it starts before calling it installed.
const version = execFileSync(join(tmp, "chrome"), ["--version"]).toString().trim();
rmSync(out, { recursive: true, force: true });
renameSync(tmp, out);
console.log(`${version} in ${out}`);
