from teiresias.cli import main

main()
