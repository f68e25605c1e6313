"""DLA EMULATOR: test infrastructure only (a stand-in libcudla.so.1, its loadable writer, test cases)."""
