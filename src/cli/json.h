/* JSON output shared by the commands and the benchmarks. */
#ifndef A2AMM_CLI_JSON_H
#define A2AMM_CLI_JSON_H

#include <stdio.h>

/* Prints s as a JSON string (to f, or stdout); a number with fmt, or null when not finite. */
void cli_json_fstr(FILE *f, const char *s);
void cli_json_str(const char *s);
void cli_json_num(const char *fmt, double v);
/* ,"key":value: a number as cli_json_num; a string, or null for NULL. */
void cli_json_key_num(const char *key, const char *fmt, double v);
void cli_json_key_str(const char *key, const char *s);

#endif
