/* `kiln tokenize`: the tokenizer an artifact carries, alone.
 *
 *   kiln tokenize FILE (--text TEXT | --text-file PATH) [--no-special]
 *   kiln tokenize FILE --decode IDS
 *
 * prints the text's ids (space-separated, with the tokenizer's BOS unless
 * --no-special), or the text the ids decode to (special tokens skipped),
 * as the tokenizer would in Python: what `kiln generate --text` reads and
 * prints, checkable on its own. Only the artifact's tokenizer section is
 * read, not its model. */
#include "tools/kiln_cli_tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "tools/kiln_cli.h"

static int kiln_tok_usage(const char* msg, const char* arg) {
  fprintf(stderr, "kiln: tokenize: %s%s%s\n(run 'kiln help' for usage)\n", msg, arg ? " " : "",
          arg ? arg : "");
  return 2;
}

/* The tokenizer section of the file at path (the whole file is read; its
 * graph is not built). */
static kiln_status_t kiln_tok_from_file(const char* path, kiln_tokenizer_t** out) {
  void* bytes = NULL;
  size_t size = 0;
  *out = NULL;
  KILN_RETURN_IF_ERROR(kiln_artifact_load_file(path, &bytes, &size));
  const void* section = NULL;
  size_t n = 0;
  kiln_status_t st = kiln_artifact_find_section(bytes, size, KILN_TOKENIZER_SECTION, &section, &n);
  if (!st && !section)
    st = kiln_status_make(KILN_INVALID_ARGUMENT,
                          "'%s' has no tokenizer (save it with kiln.save(module, path, tokenizer=...))", path);
  if (!st) st = kiln_tokenizer_load(section, n, out);
  free(bytes);
  return st ? kiln_status_annotate(st, "'%s'", path) : NULL;
}

static kiln_status_t kiln_tok_decode(const kiln_tokenizer_t* t, const char* ids) {
  const char* p = ids;
  while (*p) {
    while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
    if (!*p) break;
    char* end = NULL;
    long long id = strtoll(p, &end, 10);
    if (end == p || id < 0 || id >= kiln_tokenizer_size(t))
      return kiln_status_make(KILN_INVALID_ARGUMENT, "--decode: '%.20s' is not a token id of the %d",
                              p, (int)kiln_tokenizer_size(t));
    size_t len;
    const char* piece = kiln_tokenizer_piece(t, (int32_t)id, &len);
    fwrite(piece, 1, len, stdout);
    p = end;
  }
  putchar('\n');
  return NULL;
}

int kiln_cli_tokenize_main(int argc, char** argv) {
  const char *file = NULL, *text = NULL, *text_file = NULL, *decode = NULL;
  int special = 1;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    if (a[0] != '-' || !strcmp(a, "-")) {
      if (file) return kiln_tok_usage("more than one FILE:", a);
      file = a;
      continue;
    }
    if (!strcmp(a, "--no-special")) {
      special = 0;
      continue;
    }
    const char** slot = !strcmp(a, "--text") ? &text : !strcmp(a, "--text-file") ? &text_file
                        : !strcmp(a, "--decode") ? &decode : NULL;
    if (!slot) return kiln_tok_usage("unknown option", a);
    if (i + 1 >= argc) return kiln_tok_usage("a value is missing after", a);
    *slot = argv[++i];
  }
  if (!file) return kiln_tok_usage("no FILE given", NULL);
  if (!!text + !!text_file + !!decode != 1) return kiln_tok_usage("give one of --text, --text-file or --decode", NULL);
  kiln_tokenizer_t* t = NULL;
  char* read = NULL;
  size_t n = text ? strlen(text) : 0;
  kiln_status_t st = kiln_tok_from_file(file, &t);
  if (!st && text_file) st = kiln_cli_read_text("--text-file", text_file, (size_t)1 << 30, &read, &n);
  if (!st && decode) st = kiln_tok_decode(t, decode);
  if (!st && !decode) {
    int32_t* ids = NULL;
    size_t count = 0;
    st = kiln_tokenizer_encode(t, read ? read : text, n, special, &ids, &count);
    for (size_t i = 0; !st && i < count; ++i) printf(i ? " %d" : "%d", (int)ids[i]);
    if (!st) putchar('\n');
    free(ids);
  }
  free(read);
  kiln_tokenizer_free(t);
  fflush(stdout);
  if (st) {
    fprintf(stderr, "kiln: tokenize: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  return 0;
}
