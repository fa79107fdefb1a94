# A clone(CLONE_VM) hopper (red-team round 8), x86-64 Linux, no libc: like hopper.S, but each
# generation starts the next with a raw clone(CLONE_VM) on a ring of stacks (no page tables
# to copy, no SIGCHLD) and exits, so it hops fast even under gVisor. Assembled in the test:
#   as clonehop.S -o clonehop.o && ld -static -nostdlib -s -n -o clonehop clonehop.o
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
        call    seconds
        mov     %rax, start(%rip)
hop:    incl    count(%rip)             # the clock only every 1024 generations: a
        testl   $1023, count(%rip)      # syscall costs much under gVisor
        jnz     1f
        call    seconds
        sub     start(%rip), %rax
        cmp     $4, %rax
        jae     done
1:      mov     ring(%rip), %eax        # the next stack of the ring
        inc     %eax
        and     $255, %eax
        mov     %eax, ring(%rip)
        inc     %eax
        shl     $12, %rax
        lea     stacks(%rip), %rsi
        add     %rax, %rsi              # clone(CLONE_VM, stack top)
        mov     $0x100, %edi
        xor     %edx, %edx
        xor     %r10d, %r10d
        xor     %r8d, %r8d
        mov     $56, %eax
        syscall
        test    %rax, %rax
        jz      hop                     # the child: on its own stack, hops on
        js      hop                     # a failed clone: try again
        xor     %edi, %edi              # the parent exits at once
        mov     $60, %eax
        syscall
done:   sub     $16, %rsp
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
        jmp     leave
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
seconds:                                # %rax = CLOCK_MONOTONIC seconds
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
        .bss
        .align  4096
start:  .quad   0
ring:   .long   0
count:  .long   0
        .align  4096
stacks: .space  4096 * 257
