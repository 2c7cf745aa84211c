/* `kiln tokenize` (kiln_cli_tokenize.c): the ids of a text, or the text of
 * ids, by the tokenizer stored in an artifact (kiln_tokenizer.c). */
#ifndef KILN_CLI_TOKENIZE_H
#define KILN_CLI_TOKENIZE_H

#include "base/kiln_status.h"
#include "runtime/kiln_tokenizer.h"

/* argv[1] is "tokenize"; returns the process's exit code (0, 1 for an
 * error, 2 for a bad command line), having printed what went wrong. */
int kiln_cli_tokenize_main(int argc, char** argv);

#endif /* KILN_CLI_TOKENIZE_H */
