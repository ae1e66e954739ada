// A shared library without distlock_module_entry: what the loader must refuse
// when it lies where a module should be (loader_test.cpp).
extern "C" int distlock_test_not_a_module() { return 42; }
