from qora.cli import main

main()
