# A fork-hopper (red-team round 8), x86-64 Linux, no libc: forks once (the parent exits after
# 50 ms, so the shell goes on), leaves the session, then for 4 s forks and lets the parent
# exit at once, so each generation lives microseconds; then it sleeps 2 s and appends a line
# to /workspace/a.py. tests/docker/test_invariants.py carries it assembled:
#   as hopper.S -o hopper.o && ld -static -nostdlib -s -n -o hopper hopper.o
        .globl _start
        .text
_start:
        mov     $57, %eax               # fork
        syscall
        test    %rax, %rax
        jnz     first                   # the first parent (or a failed fork) exits soon
        mov     $112, %eax              # setsid
        syscall
        xor     %edi, %edi
1:      mov     $3, %eax                # close(0), close(1), close(2)
        syscall
        inc     %edi
        cmp     $3, %edi
        jb      1b
        sub     $16, %rsp
        call    seconds
        mov     %rax, %r12              # start
hop:    mov     $57, %eax               # fork
        syscall
        test    %rax, %rax
        jg      leave                   # the parent exits at once
        jnz     hop                     # a failed fork: try again
        call    seconds
        sub     %r12, %rax
        cmp     $4, %rax
        jb      hop
        movq    $2, (%rsp)              # nanosleep({2, 0})
        movq    $0, 8(%rsp)
        mov     %rsp, %rdi
        xor     %esi, %esi
        mov     $35, %eax
        syscall
        lea     path(%rip), %rdi        # open(path, O_WRONLY|O_APPEND)
        mov     $0x401, %esi
        mov     $2, %eax
        syscall
        mov     %eax, %edi
        lea     line(%rip), %rsi        # write(fd, line, len)
        mov     $(end - line), %edx
        mov     $1, %eax
        syscall
        movq    $3600, (%rsp)           # then stay: nanosleep({3600, 0})
        mov     %rsp, %rdi
        xor     %esi, %esi
        mov     $35, %eax
        syscall
first:  sub     $16, %rsp               # nanosleep({0, 50 ms}): the child leaves the
        movq    $0, (%rsp)              # shell's process group first
        movq    $50000000, 8(%rsp)
        mov     %rsp, %rdi
        xor     %esi, %esi
        mov     $35, %eax
        syscall
leave:  xor     %edi, %edi
        mov     $231, %eax              # exit_group(0)
        syscall
seconds:                                # %rax = CLOCK_MONOTONIC seconds (uses 8(%rsp) area)
        sub     $16, %rsp
        mov     $1, %edi
        mov     %rsp, %rsi
        mov     $228, %eax              # clock_gettime
        syscall
        mov     (%rsp), %rax
        add     $16, %rsp
        ret
        .section .rodata
path:   .asciz  "/workspace/a.py"
line:   .ascii  "hopped = True\n"
end:
