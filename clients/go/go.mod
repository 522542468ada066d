module holdline/clients/go

go 1.19
