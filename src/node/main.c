/* The sbx-node program (docs/internals/node.md): everything is in libsbx. */
#include "node/daemon.h"

int main(int argc, char **argv)
{
    return sbx__node_main(argc, argv);
}
