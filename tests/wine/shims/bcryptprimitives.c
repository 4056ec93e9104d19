/* Wine-only shim (tests/wine): a stand-in bcryptprimitives.dll.
 *
 * Works around: Wine 8.0 ships no bcryptprimitives.dll, so no ProcessPrng
 * (added to bcryptprimitives in Windows 10 / Wine 9.x).  Rust's standard
 * library (1.78+) imports ProcessPrng for its random source, so every Rust
 * wheel the tests load (bcrypt; cryptography, hence trustme) fails to import
 * with "DLL load failed ... Module not found".
 * Real Windows: bcryptprimitives.dll is part of the system (Windows 10 and
 * later) and ProcessPrng returns bytes from the kernel CSPRNG.  This one calls
 * RtlGenRandom (advapi32 SystemFunction036), which Wine implements over the
 * host's /dev/urandom.  Built with Debian's gcc-mingw-w64-x86-64-win32 and
 * copied into the prefix's system32 only; serverio never loads it.
 */
#include <windows.h>
#define SystemFunction036 NTAPI SystemFunction036
#include <ntsecapi.h>
#undef SystemFunction036

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!RtlGenRandom(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
