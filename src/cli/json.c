/* JSON output of the commands and the benchmarks: strings escaped, numbers or null. */
#include "cli/json.h"

#include <math.h>
#include <stdio.h>

void cli_json_fstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

void cli_json_str(const char *s) { cli_json_fstr(stdout, s); }

void cli_json_num(const char *fmt, double v)
{
    if (isfinite(v)) printf(fmt, v);
    else printf("null");
}

void cli_json_key_num(const char *key, const char *fmt, double v)
{
    printf(",\"%s\":", key);
    cli_json_num(fmt, v);
}

void cli_json_key_str(const char *key, const char *s)
{
    printf(",\"%s\":", key);
    if (s) cli_json_str(s);
    else printf("null");
}

