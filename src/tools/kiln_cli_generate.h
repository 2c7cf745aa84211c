/* `kiln generate` (kiln_cli_generate.c): greedy generation from a traced
 * generation step through the public C API. */
#ifndef KILN_CLI_GENERATE_H
#define KILN_CLI_GENERATE_H

/* argv[1] is "generate"; returns the process's exit code (0, 1 for an
 * error, 2 for a bad command line), having printed what went wrong. */
int kiln_cli_generate_main(int argc, char** argv);

#endif /* KILN_CLI_GENERATE_H */
