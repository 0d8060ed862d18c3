/* gcoll's settings, and NCCL's where a site configured NCCL rather than
 * gcoll.
 *
 * A setting is named by its gcoll variable (GCOLL_ALGO). Its value is, in
 * this order:
 *   1. the GCOLL_* environment variable, as given;
 *   2. the NCCL variable mapped to it, from the environment;
 *   3. that NCCL variable from $NCCL_CONF_FILE when set (else ~/.nccl.conf,
 *      ~ being $HOME, else the password entry's home), then /etc/nccl.conf;
 *      within one file its first line for the variable.
 * That is NCCL's own precedence: NCCL copies each file's lines into its
 * environment without overwriting, the user's file first.
 *
 * NCCL values are translated into gcoll's (NCCL_ALGO=Ring gives ring, a list
 * gives the one entry gcoll can honour, NCCL_BUFFSIZE for 8 steps gives the
 * slot size); one NCCL cannot express in gcoll's terms is ignored, as if
 * unset. With GCOLL_DEBUG=INFO (or NCCL_DEBUG=INFO) each NCCL variable that
 * gives a gcoll setting, or is ignored, is named once per process on stderr
 * with where it came from (the environment, or file and line).
 *
 * Files are read once per process (thread-safe), only when regular and at
 * most GCOLL_SETTINGS_FILE_MAX bytes; lines are KEY=VALUE with whitespace
 * around both trimmed, '#' starts a comment line, and anything else is
 * skipped. */
#ifndef GCOLL_RUNTIME_SETTINGS_H
#define GCOLL_RUNTIME_SETTINGS_H

#include <stddef.h>

#include "common/netaddr.h"

#define GCOLL_SETTINGS_FILE_MAX (1u << 20)

/* The value of the setting, or NULL when none of the sources sets it (an
 * empty value counts as unset). The string stays valid for the life of the
 * process, unless it is the GCOLL_* variable itself and the environment is
 * changed. Names without an NCCL counterpart read only the environment. */
const char *gcoll_setting(const char *gcoll_name);

/* Where gcoll_setting(gcoll_name) came from, for error messages: "GCOLL_X",
 * "NCCL_X=VALUE (environment)", "NCCL_X=VALUE (FILE:LINE)"; "" when unset. */
void gcoll_setting_origin(const char *gcoll_name, char *buf, size_t len);

/* The setting as an integer in [min, max]: 0 and *out set; 1 when unset
 * (*out untouched); -1 with one line in err naming where the value came
 * from when it is not an integer in range. */
int gcoll_setting_long(const char *gcoll_name, long min, long max, long *out, char *err,
                       size_t errlen);

/* gcoll_ifname_match (NCCL_SOCKET_IFNAME-style lists): common/netaddr.h. */

/* Tests only: forget the files read and the lines logged, and read
 * system_conf (NULL: /etc/nccl.conf) in place of /etc/nccl.conf from now on.
 * Not safe while other threads read settings. */
void gcoll_settings_reset_for_test(const char *system_conf);

/* Whether GCOLL_DEBUG (or NCCL_DEBUG) asks for INFO lines (INFO, TRACE). */
int gcoll_log_info_enabled(void);

#endif
