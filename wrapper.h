/* The kernel ABI perfring is generated from (see build.rs). */
#include <linux/perf_event.h>
#include <linux/hw_breakpoint.h>
/* F_SETOWN_EX, F_OWNER_TID, F_SETSIG and struct f_owner_ex: libc lacks some of them. */
#include <linux/fcntl.h>
/* siginfo_t as the kernel fills it, for si_perf_data/si_perf_type (TRAP_PERF). */
#include <asm/siginfo.h>
/* PERF_REG_X86_*: the register numbers of sample_regs_user, for unwinding user stacks. */
#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif
