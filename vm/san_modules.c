/* san_modules.c - in a sanitized ppvm only (make SANITIZE=1): keep every
 * dlopen'ed module loaded to the end, so LeakSanitizer can say which
 * library allocated a block that is still held at exit.
 *
 * Open MPI loads its components (mca_<framework>_<component>.so) with
 * dlopen and unloads them in MPI_Finalize; what they allocated and never
 * freed is reported at exit with frames in an "<unknown module>", which no
 * suppression can name, so every rank would fail the leak check for Open
 * MPI's leaks. This dlclose, defined in the executable, takes the place of
 * libc's for every library (the dynamic linker resolves the executable's
 * definition first) and leaves the module mapped; the leaks then carry the
 * component's name, which tests/sanitize/lsan.supp suppresses (mca_*).
 * A process that ends anyway loses nothing by keeping its modules. */
#ifdef __SANITIZE_ADDRESS__
int dlclose(void *handle);
int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int pp_san_modules_unused;
#endif
