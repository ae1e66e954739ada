// main() of distlock's Catch2 test programs: the shared session (session.cpp).
#include "support.hpp"

int main(int argc, char** argv) { return distlock::test::run_session(argc, argv); }
