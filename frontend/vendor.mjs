// The chat's Markdown libraries, vendored: markdown-it and DOMPurify (versions pinned by this
// folder's package-lock.json) bundled by esbuild into one ES module each under
// sessions_app/static/june/vendor/, which the site serves as it serves its own scripts (no
// build step at install or run time). `node frontend/vendor.mjs [out-dir]` writes them again;
// tests/unit/test_frontend.py checks that the files there are what this writes.
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(process.argv[2] || path.join(here, "..", "sessions_app", "static", "june", "vendor"));
const version = (name) => JSON.parse(readFileSync(path.join(here, "node_modules", name, "package.json"), "utf8")).version;

const LIBRARIES = [
  { name: "markdown-it", entry: "markdown-it/dist/markdown-it.mjs", file: "markdown-it.js" },
  { name: "dompurify", entry: "dompurify/dist/purify.es.mjs", file: "purify.js" },
];

for (const lib of LIBRARIES) {
  await build({
    entryPoints: [path.join(here, "node_modules", lib.entry)],
    outfile: path.join(out, lib.file),
    bundle: true,
    format: "esm",
    minify: true,
    legalComments: "inline",
    target: "es2020",
    banner: { js: `// ${lib.name} ${version(lib.name)} from npm, bundled by frontend/vendor.mjs: do not edit` },
    logLevel: "warning",
  });
  console.log(`${lib.file}: ${lib.name} ${version(lib.name)}`);
}
