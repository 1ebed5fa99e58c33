// The TypeScript declarations (types/) against the TypeScript compiler and against src/: they
// compile, with strict settings, together with an application's use of them (test-types/,
// where each `@ts-expect-error` is a misuse they must refuse); and every value a module exports
// is declared, and nothing is declared that it does not export.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

import ts from 'typescript';

const here = (path) => fileURLToPath(new URL(`../${path}`, import.meta.url));

test('the declarations compile, and refuse what test-types/ expects them to', () => {
  const config = ts.getParsedCommandLineOfConfigFile(here('tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(d.messageText) });
  assert.ok(config.fileNames.some((name) => name.endsWith('test-types/usage.ts')), 'test-types/usage.ts is checked');
  const program = ts.createProgram(config.fileNames, config.options);
  const problems = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName}:${d.file.getLineAndCharacterOfPosition(d.start).line + 1}: ` : '';
    return where + ts.flattenDiagnosticMessageText(d.messageText, '\n');
  });
  assert.deepEqual(problems, []);
});

/** The names of the values (not types) a declaration file exports. */
function declaredValues(path) {
  const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
  const names = new Set();
  for (const statement of source.statements) {
    const exported = statement.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
    if (!exported) continue;
    if (ts.isVariableStatement(statement)) statement.declarationList.declarations.forEach((d) => names.add(d.name.text));
    else if (ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) names.add(statement.name.text);
  }
  return [...names].sort();
}

for (const [entry, declarations] of [['src/index.js', 'types/index.d.ts'], ['src/react.js', 'types/react.d.ts']]) {
  test(`${declarations} declares exactly what ${entry} exports`, async () => {
    const exported = Object.keys(await import(here(entry))).sort();
    assert.deepEqual(declaredValues(here(declarations)), exported);
  });
}

test('types/frames.d.ts declares only what src/frames.js exports', async () => {
  // frames.js also exports the decoders the transports use; the declarations name the wire format.
  const exported = Object.keys(await import(here('src/frames.js')));
  const declared = declaredValues(here('types/frames.d.ts'));
  assert.ok(declared.length > 0);
  assert.deepEqual(declared.filter((name) => !exported.includes(name)), []);
});
